"""Serving layer: the HTTP API (app.py: the app factory, routes/, middleware/) and the command line (cli/), both on
top of the library."""
