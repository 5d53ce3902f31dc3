"""The HTTP API's ASGI middleware, one concern per module; serve/app.py stacks them (`middleware`)."""
