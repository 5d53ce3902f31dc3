"""Generate the catalog sample corpus and its golden question set, deterministically.

    python tools/build_catalog.py

Writes golden/catalog/: docs/ (project notes, contracts, pitches, reports, press pages), roster.csv and
sources.yaml, and golden/catalog_golden.yaml. Everything comes from the data tables below; the aggregation answers are
computed from those tables with the metadata query semantics (see `compute`), never typed by hand. Re-running it
reproduces the same bytes (fixed zip timestamps for docx/pptx, reportlab's invariant mode for the PDFs).
"""
from __future__ import annotations

import csv
import datetime as dt
import html
import io
import re
import zipfile
from decimal import Decimal
from pathlib import Path

import yaml

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
CATALOG = GOLDEN_DIR / "catalog"
DOCS = CATALOG / "docs"
GOLDEN = GOLDEN_DIR / "catalog_golden.yaml"
STUDIO = "Fernwick Studio"
D = dt.date.fromisoformat

# ----------------------------------------------------------------------------------------------------------- data
# One row per project note (docs/projects/<slug>.md). `roster` holds the roster-only columns; `roster_publisher` /
# `roster_genre` are the deliberate MISMATCH cases (the roster wins for those fields). `malformed` writes a front
# matter YAML cannot parse; `in_roster=False` is the MISSING_IN_ROSTER case.
PROJECTS = [
    dict(slug="tidal-lines", project_id="P-001", title="Tidal Lines", publisher="Brightfield Games", genre="puzzle",
         themes=["ocean", "tides"], year=2022, status="released", budget_k=180, signed=D("2021-05-10"),
         platforms=["PC", "Switch"], team="Heron", region="EU",
         body=["Tidal Lines is a tile-routing puzzle set on a string of tidal islands. Each level is a small harbour "
               "map where the player lays channels of sand and stone so that the incoming tide floods exactly the "
               "basins marked with buoys, no more and no less. The moon phase shown in the corner of the screen "
               "decides how high the water climbs, so the same board plays differently at spring tide and at neap "
               "tide.",
               "The design grew out of a weekend jam prototype built around one question: can water itself be the "
               "cursor? The answer became the central rule of the game, because the player never moves a character; "
               "they only shape the coastline and then release the sea. A full campaign spans 140 boards across "
               "seven archipelagos, and a sandbox mode lets players share their own shorelines through a short "
               "text code.",
               "Four people built it over fourteen months. The art direction leans on pale watercolour washes and "
               "hand-inked gull silhouettes, and the soundtrack is mostly recorded surf layered under a slow "
               "marimba. Critics singled out the undo button that rewinds the tide in real time as the feature "
               "that made failure feel gentle rather than punishing."]),
    dict(slug="orchard-run", project_id="P-002", title="Orchard Run", publisher="Northwind Interactive",
         genre="racing", themes=["citrus", "countryside"], year=2023, status="released", budget_k=420,
         signed=D("2022-02-21"), platforms=["PC", "PS5", "Xbox"], team="Kiln", region="NA",
         body=["Orchard Run is an arcade kart racer staged on the terraced lemon and orange groves of an invented "
               "Mediterranean valley. Drivers pilot converted fruit carts down dusty switchbacks, collecting "
               "crates that can be fired backwards as sticky marmalade slicks. Every track ends at the valley "
               "co-operative, where the crates you kept intact are weighed and count towards your championship "
               "score.",
               "The handling model rewards drifting through the irrigation ditches, which refill your boost meter "
               "but shake loose any fruit stacked on the back of the cart. That tension between speed and cargo is "
               "the heart of the game, and it made split-screen races with four players famously loud.",
               "Eleven developers worked on the game at its peak, including a contract physics programmer who "
               "rewrote the suspension code twice. The launch shipped with twelve circuits, and two free seasonal "
               "updates later added night harvests with lanterns strung between the trees."]),
    dict(slug="lantern-keeper", project_id="P-003", title="Lantern Keeper", publisher="Lantern House",
         genre="puzzle", themes=["lighthouse", "night"], year=2021, status="released", budget_k=95.5,
         signed=D("2020-09-30"), platforms=["PC", "iOS", "Android"], team="Heron", region="EU",
         roster_publisher="Northwind Interactive",
         body=["Lantern Keeper casts the player as the last keeper of a lighthouse on a foggy northern cape. Each "
               "night a handful of ships must reach the harbour, and the only tool the keeper has is the great "
               "lens: rotating prisms, shuttering panes and bouncing the beam off mirrored buoys so every hull "
               "catches the light before it strikes the rocks.",
               "The puzzles are optical rather than spatial. Light splits, bends and fades with distance, and "
               "coloured glass filters tell different vessels different things, so a red beam turns a trawler "
               "away while a green one calls a ferry in. Later chapters add snowstorms that scatter the beam and a "
               "smuggler's schooner that wants to stay in the dark.",
               "It was the studio's first commercial release, made by three people in a rented attic above a "
               "chandlery. The mobile port arrived six months after the desktop launch and introduced a "
               "one-finger control scheme that later became the default everywhere."]),
    dict(slug="marmalade-circuit", project_id="P-004", title="Marmalade Circuit", publisher="Brightfield Games",
         genre="racing", themes=["citrus", "kitchen"], year=2024, status="released", budget_k=510,
         signed=D("2023-04-12"), platforms=["PC", "Switch", "PS5"], team="Kiln", region="NA",
         body=["Marmalade Circuit shrinks its racers down to the size of a thumb and sets them loose in a "
               "farmhouse kitchen during the annual jam-making weekend. Tracks wind across chopping boards, "
               "through a colander slalom and up the side of a copper preserving pan, while the cook's hands "
               "sweep across the course and reshape it between laps.",
               "Unlike the studio's earlier racer, this one is built around time trials and ghost data. Players "
               "race against recorded laps from friends and from the developers themselves, and the sticky "
               "surfaces of spilled syrup make the racing line change as a session goes on. A photo mode lets "
               "you freeze a race mid-jump over a bowl of sliced oranges.",
               "The game was the first one the studio licensed music for, a set of brass-band arrangements of "
               "old kitchen songs. Development took twenty months with a team of fourteen at its largest."]),
    dict(slug="deepwater-patience", project_id="P-005", title="Deepwater Patience", publisher="Lantern House",
         genre="fishing", themes=["ocean", "weather"], year=2025, status="released", budget_k=260,
         signed=D("2024-01-18"), platforms=["PC", "Switch"], team="Harbor", region="EU",
         body=["Deepwater Patience is a slow fishing game about a retired ferry captain who spends a year on a "
               "small boat off a windswept archipelago. There is no timer and no score; the player reads the "
               "weather, chooses a bait, drops a line and waits, and the journal fills with sketches of every "
               "species landed, from mackerel shoals to a rare silver halibut that only bites during autumn "
               "gales.",
               "The line tension is communicated entirely through sound and controller rumble, so the best "
               "anglers play with their eyes half closed. Weather systems roll in over hours of play, and a "
               "sudden squall can force the captain back to harbour with an empty cooler. Players have "
               "described the game as meditative, and many leave it running simply to listen to the rain on "
               "the cabin roof.",
               "Five developers built it, two of whom grew up in a fishing town and recorded the creaking hull "
               "and the winch themselves. A marine biologist reviewed every fish description in the journal."]),
    dict(slug="clockwork-cantata", project_id="P-006", title="Clockwork Cantata", publisher="Northwind Interactive",
         genre="rhythm", themes=["clockwork", "music"], year=2022, status="released", budget_k=330,
         signed=D("2021-07-02"), platforms=["PC", "PS5"], team="Signal", region="NA",
         body=["Clockwork Cantata is a rhythm game performed inside the mechanism of a cathedral clock. Gears, "
               "escapements and hammer arms strike out a choral score, and the player keeps the tempo by tapping "
               "in time with the pendulum while repairing broken teeth on the fly.",
               "Each movement of the cantata is a level, and the difficulty comes from polyrhythm: the bells "
               "might ring in threes while the choir sings in fours. A practice room strips a movement down to "
               "single voices so players can learn the parts before the full orchestra joins in.",
               "The score was written by a chamber composer who had never worked on a game before, and it was "
               "recorded with a real twelve-voice choir in a converted chapel. The team of nine spent almost "
               "half the budget on that recording session."]),
    dict(slug="grove-wardens", project_id="P-007", title="Grove Wardens", publisher="Lantern House",
         genre="strategy", themes=["forest", "seasons"], year=2023, status="released", budget_k=290,
         signed=D("2022-06-15"), platforms=["PC"], team="Fenn", region="EU",
         body=["Grove Wardens is a turn-based strategy game about tending an ancient woodland across decades. "
               "Each turn is a season: the player plants saplings, sets controlled burns, negotiates with "
               "charcoal burners and deer herds, and tries to keep the canopy healthy while settlers press in "
               "from the valley.",
               "There is no army and no conquest. Victory comes from a biodiversity index that rewards mixed "
               "ages of trees, standing deadwood and open glades, which means the optimal play is often to do "
               "nothing for several winters in a row. Reviewers compared it to a board game played with a "
               "calendar instead of dice.",
               "A team of seven designed the ecology simulation together with a forestry lecturer, and the "
               "in-game field guide lists more than sixty plant species drawn in pencil."]),
    dict(slug="sugar-glass", project_id="P-008", title="Sugar Glass", publisher="Brightfield Games",
         genre="puzzle", themes=["candy", "glass"], year=2024, status="released", budget_k=150,
         signed=D("2023-08-08"), platforms=["Switch", "iOS"], team="Heron", region="APAC",
         roster_publisher="Copperleaf Publishing",
         body=["Sugar Glass is a physics puzzle game about a confectioner who blows delicate sculptures out of "
               "molten sugar. The player tilts, cools and reheats the glass, which stiffens as it loses heat "
               "and shatters if it is bent too far, to match a customer's sketch before the sugar sets.",
               "Levels are orders placed at a seaside sweet shop: a swan for a wedding, a lighthouse for a "
               "retirement party, an impossible knot for a visiting mathematician. Later orders mix coloured "
               "syrups that cool at different speeds, turning each sculpture into a juggling act of timing.",
               "The team of four prototyped the cooling model with real isomalt in the studio kitchen, which "
               "is why the crack sound effects are recordings of actual failures."]),
    dict(slug="rooftop-relay", project_id="P-009", title="Rooftop Relay", publisher="Northwind Interactive",
         genre="platformer", themes=["city", "night"], year=2022, status="released", budget_k=240,
         signed=D("2021-10-19"), platforms=["PC", "Switch", "Xbox"], team="Kiln", region="NA",
         body=["Rooftop Relay is a side-scrolling platformer about night couriers who pass parcels from roof to "
               "roof across a sleeping city. Each runner has a stamina bar and a single move, a wall kick, a "
               "glide or a grappling cord, and the player hands the parcel between them at chalk-marked "
               "relay points.",
               "Routes branch constantly, and the fastest lines require handing off mid-air. The city wakes "
               "up as the night goes on: windows light up, washing lines appear and pigeons scatter, so a "
               "route that worked at midnight can be blocked by dawn.",
               "Eight people made the game. Its accessibility options, including a slower global speed and "
               "remappable hand-offs, were added after a public playtest and are now a studio standard."]),
    dict(slug="saltmarsh-tactics", project_id="P-010", title="Saltmarsh Tactics", publisher="Brightfield Games",
         genre="strategy", themes=["marsh", "ocean"], year=2025, status="released", budget_k=380,
         signed=D("2024-03-27"), platforms=["PC", "PS5"], team="Fenn", region="EU",
         body=["Saltmarsh Tactics is a squad tactics game set in a drowned estuary where rival salt-making "
               "guilds fight over tidal flats. Every map floods and drains on a visible schedule, so a ridge "
               "that is a fortress at low water becomes an island, or a trap, two turns later.",
               "Units are punt crews, eel catchers and reed archers, and none of them can swim well in armour. "
               "Battles are short, usually under twenty minutes, and the campaign map is a ledger of salt pans "
               "that generate income only if they are left unmolested through a full tide cycle.",
               "The project was the studio's first with an external publisher producer embedded in the team, "
               "and the ten-person crew credits that arrangement with keeping the scope honest."]),
    dict(slug="lemonade-lab", project_id="P-011", title="Lemonade Lab", publisher="Lantern House",
         genre="puzzle", themes=["citrus", "chemistry"], year=2023, status="released", budget_k=120,
         signed=D("2022-11-03"), platforms=["iOS", "Android"], team="Heron", region="APAC",
         body=["Lemonade Lab is a mobile puzzle game in which the player runs a summer lemonade stand that is "
               "secretly a chemistry set. Customers arrive with cards describing a flavour, sour, fizzy, "
               "cloudy or bright, and the player mixes lemon juice, sugar syrup, soda and a growing cabinet of "
               "unusual reagents to hit the exact target on a pH gauge.",
               "Mistakes foam over the counter in colourful ways, and the game leans into that: some of the "
               "best-loved levels ask for the most dramatic failure possible. Each week a new ingredient "
               "unlocks, from grapefruit peel to a suspicious blue powder labelled only with a question mark.",
               "Lemonade Lab was built by three developers in eight months and remains the studio's most "
               "downloaded title. A science teacher wrote the short explanations that pop up after each "
               "reaction."]),
    dict(slug="ember-hollow", project_id="P-012", title="Ember Hollow", publisher="Northwind Interactive",
         genre="roguelike", themes=["volcano", "caves"], year=2024, status="released", budget_k=460,
         signed=D("2023-01-25"), platforms=["PC", "PS5", "Xbox"], team="Signal", region="NA",
         body=["Ember Hollow is a roguelike descent into the cooling tunnels of a dormant volcano. Each run "
               "begins at the crater rim with a lantern of limited oil, and the caverns below are rebuilt "
               "every time from hand-made rooms stitched together by a generator the team called the "
               "quarryman.",
               "Combat is fast and punishing: obsidian beetles, magma eels and collapsing ceilings all end a "
               "run in seconds, and the only permanent progress is the map the player's predecessors left "
               "scratched on the cave walls. Heat is a resource as well as a hazard, since standing near lava "
               "recharges abilities but cracks the lantern glass.",
               "The twelve-person team shipped the game after a year of early access, during which players "
               "voted on the final boss, a furnace-hearted salamander."]),
    dict(slug="paper-comets", project_id="P-013", title="Paper Comets", publisher="Copperleaf Publishing",
         genre="platformer", themes=["space", "papercraft"], year=2025, status="released", budget_k=210,
         signed=D("2024-05-09"), platforms=["Switch", "PC"], team="Kiln", region="APAC",
         roster_genre="puzzle",
         body=["Paper Comets is a platformer built entirely from folded paper. The hero is an origami astronaut "
               "hopping between cardboard planets held up by visible sticky tape, and the levels unfold like "
               "pop-up books as the player reaches them.",
               "Folding is the core mechanic: creasing a planet's surface turns slopes into ramps and opens "
               "hidden pockets, and later worlds let the player fold the background itself to bring distant "
               "platforms closer. Comets made of crumpled tissue streak across each stage and can be ridden "
               "if timed well.",
               "Six people built it, and every texture was scanned from real paper, including a box of "
               "vintage star charts bought at a flea market."]),
    dict(slug="quarry-kings", project_id="P-014", title="Quarry Kings", publisher="Northwind Interactive",
         genre="strategy", themes=["mining", "trade"], year=2021, status="released", budget_k=310,
         signed=D("2020-11-11"), platforms=["PC"], team="Fenn", region="EU",
         roster_publisher="Lantern House",
         body=["Quarry Kings is an economic strategy game about rival stone-cutting families in a granite "
               "valley. Players open quarry faces, hire masons, build ox roads and bid for cathedral "
               "commissions that demand specific grades and colours of stone.",
               "The market is shared and finite, so flooding the town with cheap rubble crashes prices for "
               "everyone. Seasoned players talk about the game as a negotiation simulator as much as a "
               "builder, because alliances over road tolls decide most matches.",
               "It was made by five people and later received a free expansion that added marble and a "
               "canal network."]),
    dict(slug="velvet-drift", project_id="P-015", title="Velvet Drift", publisher="Copperleaf Publishing",
         genre="racing", themes=["night", "city"], year=2026, status="in development", budget_k=640,
         signed=D("2025-02-14"), platforms=["PC", "PS5", "Xbox"], team="Kiln", region="NA",
         body=["Velvet Drift is a neon-lit street racer set in a coastal city after midnight. The driving model "
               "is built around long, controlled slides through rain-slicked intersections, and the style "
               "meter rewards clean drifts over raw speed.",
               "Races are organised through a late-night radio show whose host narrates your rivalries, and "
               "the city's districts change their traffic patterns as the night wears on. The team is "
               "prototyping a synchronised drift mode where two cars must mirror each other through a course.",
               "The project is the studio's largest to date, with sixteen developers and an external audio "
               "house producing the synthwave soundtrack."]),
    dict(slug="moss-and-mortar", project_id="P-016", title="Moss & Mortar", publisher="Brightfield Games",
         genre="simulation", themes=["garden", "village"], year=2024, status="released", budget_k=200,
         signed=D("2023-06-30"), platforms=["PC", "Switch"], team="Harbor", region="EU",
         body=["Moss & Mortar is a cozy building simulation about restoring a crumbling hillside village. The "
               "player repairs dry-stone walls, re-roofs cottages with slate and lets moss, ivy and wildflowers "
               "creep back over the stones, and the village repopulates as it becomes beautiful again.",
               "There are no failure states. Villagers leave small requests on their doorsteps, a bench facing "
               "the sunset, a well with a bucket that actually works, and fulfilling them slowly reveals the "
               "story of why the village emptied in the first place.",
               "A team of six made the game, and the stonework system was designed with advice from a "
               "working waller who sent the team photographs of his favourite walls."]),
    dict(slug="kite-season", project_id="P-017", title="Kite Season", publisher="Lantern House",
         genre="platformer", themes=["wind", "festival"], year=2023, status="released", budget_k=175,
         signed=D("2022-04-04"), platforms=["Switch", "iOS"], team="Harbor", region="APAC",
         body=["Kite Season is a breezy platformer in which a child chases a runaway kite across a town "
               "preparing for its spring kite festival. Gusts of wind are visible as ribbons of colour and "
               "carry the player over rooftops, market stalls and the river bridge.",
               "The wind changes direction every few seconds, and reading it is the whole skill of the game. "
               "Festival banners show the next gust in advance, and collectible tail ribbons let players "
               "customise the kite that leads them onward.",
               "Five developers built it, and its gentle difficulty curve made it a favourite for families "
               "playing together on one console."]),
    dict(slug="cinder-sprint", project_id="P-018", title="Cinder Sprint", publisher="Northwind Interactive",
         genre="rhythm", themes=["fire", "music"], year=2026, status="in development", budget_k=355,
         signed=D("2025-07-22"), platforms=["PC", "PS5"], team="Signal", region="NA",
         body=["Cinder Sprint is a rhythm runner in development in which a fire spirit races through a burning "
               "forest to a pounding percussion score. Every jump, slide and dash lands on the beat, and "
               "mistiming a step scorches the path ahead.",
               "The team is building a tool that converts any drum track into a course, so the community can "
               "race to its own music. Early playtesters described the top difficulty as relentless, and the "
               "design goal is exactly that: ninety seconds of pure pressure per song.",
               "Ten developers are on the project, including two who previously worked on Clockwork Cantata."]),
    dict(slug="mirror-orchard", project_id="P-019", title="Mirror Orchard", publisher="Copperleaf Publishing",
         genre="puzzle", themes=["citrus", "reflection"], year=2025, status="released", budget_k=160,
         signed=D("2024-08-19"), platforms=["PC", "iOS"], team="Heron", region="APAC",
         body=["Mirror Orchard is a puzzle game set in a grove of tangerine trees that grows on both sides of a "
               "still pond. Every action the player takes on the bank is reflected in the water world below, "
               "but the reflection is imperfect: trees mirrored in the pond bloom a season later and paths run "
               "backwards.",
               "Solutions require thinking in both worlds at once, ripening a fruit above so that its "
               "reflection falls into a basket below. The final chapters drain the pond entirely and ask the "
               "player to rebuild it one reflection at a time.",
               "Four developers worked on the game, and its pastel orange palette was chosen so that colour-"
               "blind players could still tell the two worlds apart."]),
    dict(slug="hollowbell-tower", project_id="P-020", title="Hollowbell Tower", publisher="Brightfield Games",
         genre="roguelike", themes=["bells", "tower"], year=2022, status="cancelled", budget_k=140,
         signed=D("2021-12-01"), platforms=["PC"], team="Signal", region="EU",
         body=["Hollowbell Tower was a roguelike climb up a bell tower whose floors rearrange every time the "
               "great bell tolls. The player had to reach the belfry before the next chime or lose the floors "
               "they had mapped.",
               "The project was cancelled after a vertical slice showed that the rearranging floors made runs "
               "feel random rather than tense. Some of its generation code was later reused in Ember Hollow, "
               "and the bell recordings appear in Clockwork Cantata."]),
    dict(slug="glacier-post", project_id="P-021", title="Glacier Post", publisher="Copperleaf Publishing",
         genre="adventure", themes=["snow", "mail"], year=2024, status="released", budget_k=230,
         signed=D("2023-02-07"), platforms=["PC", "Switch"], team="Harbor", region="EU",
         body=["Glacier Post is a narrative adventure about a postal worker delivering letters to remote huts "
               "on a melting glacier. The player plans routes with a paper map and a compass, hauls a sledge "
               "across crevasse fields and reads, with permission, the letters that explain why each hermit "
               "chose to live on the ice.",
               "Weather and daylight are the main obstacles. Whiteouts hide the route markers, and the "
               "glacier itself shifts between chapters, so familiar paths crack open over the course of the "
               "story.",
               "Seven people made the game, and a retired mountain rescue guide consulted on the rope work "
               "and the crevasse scenes."]),
    dict(slug="yuzu-yard", project_id="P-022", title="Yuzu Yard", publisher="Lantern House",
         genre="simulation", themes=["citrus", "garden"], year=2026, status="in development", budget_k=275,
         signed=D("2025-03-14"), platforms=["PC", "Switch", "iOS"], team="Harbor", region="APAC",
         body=["Yuzu Yard is a gardening simulation in development about inheriting a small citrus nursery in a "
               "mountain town. The player grafts yuzu, sudachi and kumquat trees, protects them from frost "
               "with straw wraps and sells fruit at a Sunday market.",
               "The core loop is slow and seasonal. Trees take in-game years to mature, so the game encourages "
               "short daily sessions rather than long ones, and neighbours drop by with recipes that turn "
               "surplus fruit into preserves, bath salts and ponzu.",
               "Six developers are working on it, and the team visited three real nurseries to photograph "
               "bark, blossom and the bamboo frames used in winter."]),
    dict(slug="starling-atlas", project_id="P-031", title="Starling Atlas", publisher="Northwind Interactive",
         genre="adventure", themes=["birds", "maps"], year=2024, status="cancelled", budget_k=300,
         signed=D("2023-10-16"), platforms=["PC", "PS5"], in_roster=False,
         body=["Starling Atlas was planned as an exploration adventure in which the player charts a continent by "
               "following migrating flocks. Murmurations would reveal hidden valleys, and the atlas would fill "
               "in only where the birds had flown.",
               "The project was cancelled during pre-production when the flocking simulation proved too costly "
               "to run on the target consoles. Its cartography interface survives as the map screen of Glacier "
               "Post."]),
    dict(slug="brine-and-bramble", project_id="P-023", title="Brine & Bramble", publisher="Copperleaf Publishing",
         genre="adventure", themes=["ocean", "bramble"], year=2024, status="released", budget_k=190,
         signed=D("2023-09-05"), platforms=["PC", "Switch"], team="Fenn", region="EU", malformed=True,
         body=["Brine & Bramble is a coastal adventure about two siblings who forage along a ragged shoreline "
               "where blackberry thickets grow right down to the shingle. One sibling wades into rock pools for "
               "crabs and samphire, the other cuts paths through the brambles, and the player switches between "
               "them to reach the lighthouse cottage where their grandmother left a recipe book.",
               "Each recipe needs ingredients from both the sea and the hedgerow, so the map is a tangle of "
               "tide-locked coves and thorny lanes. Cooking a dish unlocks a memory of the grandmother, told in "
               "watercolour vignettes.",
               "Six developers worked on it, and the foraging guide in the menu was checked by a local "
               "naturalist for anything that should not be eaten."]),
]
ROSTER_ONLY = [dict(project_id="P-024", name="Thimble Thunder", publisher="Brightfield Games", genre="platformer",
                    team="Kiln", region="NA")]

# docx contracts: core properties (all explicit) + a heading and body paragraphs.
CONTRACTS = [
    dict(slug="marmalade-circuit-publishing", title="Publishing Agreement: Marmalade Circuit",
         subject="Publishing agreement", author="Dana Whitlock", keywords="contract, publishing, P-004",
         created=dt.datetime(2023, 4, 3, 10, 0), modified=dt.datetime(2023, 4, 12, 16, 30),
         body=["This agreement between Fernwick Studio and Brightfield Games covers worldwide publishing of "
               "Marmalade Circuit on desktop and console platforms.",
               "The publisher pays a recoupable advance in four milestone instalments and receives a share of "
               "net receipts of sixty percent until recoupment and forty percent afterwards. The studio keeps "
               "the intellectual property, including the kitchen setting and all characters.",
               "Either party may end the agreement if a milestone is missed by more than ninety days and not "
               "cured within a further thirty."]),
    dict(slug="marmalade-circuit-music", title="Music Licence: Marmalade Circuit Brass Arrangements",
         subject="Music licensing", author="Dana Whitlock", keywords="contract, licensing, music, P-004",
         created=dt.datetime(2024, 2, 6, 9, 15), modified=dt.datetime(2024, 2, 20, 11, 0),
         body=["The licensor grants Fernwick Studio a non-exclusive licence to use eight brass-band "
               "arrangements in Marmalade Circuit, its trailers and its soundtrack release.",
               "The fee is a flat sum per arrangement with no royalty on game sales. Soundtrack streaming "
               "income is split evenly between the licensor and the studio.",
               "The licence is perpetual for the game itself and runs for seven years for promotional use."]),
    dict(slug="deepwater-patience-port", title="Porting Services Agreement: Deepwater Patience",
         subject="Porting services", author="Omar Reyes", keywords="contract, porting, Switch, P-005",
         created=dt.datetime(2025, 1, 20, 14, 0), modified=dt.datetime(2025, 2, 3, 9, 45),
         body=["Fernwick Studio engages an external porting house to bring Deepwater Patience to Nintendo "
               "Switch, including handheld performance work and rumble tuning for the fishing line.",
               "Payment is a fixed fee split across three deliveries: a first playable build, a certification "
               "candidate and a day-one patch. Rumble patterns remain the studio's property.",
               "The porting house must reach a stable thirty frames per second in handheld mode before the "
               "certification candidate is accepted."]),
    dict(slug="saltmarsh-tactics-localisation", title="Localisation Agreement: Saltmarsh Tactics",
         subject="Localisation services", author="Omar Reyes",
         keywords="contract, localisation; translation, P-010",
         created=dt.datetime(2025, 4, 2, 11, 30), modified=dt.datetime(2025, 4, 28, 17, 5),
         body=["This agreement covers translation of Saltmarsh Tactics into French, German, Japanese and "
               "Brazilian Portuguese, including the salt-guild ledger texts and unit barks.",
               "Rates are per source word with a separate hourly rate for linguistic testing. The vendor keeps "
               "a glossary of guild terms that the studio may reuse for future projects.",
               "Delivery is due six weeks before launch, with one round of fixes included."]),
    dict(slug="yuzu-yard-publishing", title="Publishing Agreement: Yuzu Yard",
         subject="Publishing agreement", author="Dana Whitlock", keywords="contract, publishing, P-022",
         created=dt.datetime(2025, 3, 10, 10, 0), modified=dt.datetime(2025, 3, 14, 15, 20),
         body=["Lantern House will publish Yuzu Yard worldwide on desktop, Switch and iOS.",
               "The advance is paid monthly during production against an agreed schedule of playable builds. "
               "The publisher funds a visit to citrus nurseries for reference photography and receives first "
               "refusal on a sequel.",
               "Marketing commitments include a festival booth and a demo during a seasonal showcase."]),
    dict(slug="velvet-drift-audio", title="Audio Production Agreement: Velvet Drift",
         subject="Audio production", author="Priya Anand", keywords="contract, audio, licensing, P-015",
         created=dt.datetime(2025, 6, 18, 13, 0), modified=dt.datetime(2025, 7, 1, 10, 10),
         body=["An external audio house will compose and produce the synthwave soundtrack and the radio-host "
               "voice lines for Velvet Drift.",
               "The studio owns the master recordings; the audio house keeps the right to perform the tracks "
               "live. Payment follows four milestones ending with the final mix.",
               "The radio host's lines are recorded in English first, with a pick-up session budgeted for "
               "story changes."]),
]

# pptx pitch decks: slides of (title, bullets).
PITCHES = [
    dict(slug="yuzu-yard-pitch", title="Yuzu Yard: Publisher Pitch", subject="Pitch deck for Yuzu Yard",
         author="Mina Okafor", keywords="pitch, gardening, citrus, P-022",
         created=dt.datetime(2024, 11, 5, 9, 0), modified=dt.datetime(2024, 11, 20, 18, 0),
         slides=[("Yuzu Yard", ["A slow gardening sim about a citrus nursery in a mountain town",
                                "Graft, protect from frost, sell at the Sunday market"]),
                 ("Why now", ["Cozy games with short daily sessions keep growing",
                              "No competitor focuses on fruit trees and grafting"]),
                 ("Ask", ["Eighteen months of production for six developers",
                          "Launch on desktop, Switch and iOS"])]),
    dict(slug="deepwater-patience-dlc-pitch", title="Deepwater Patience: Winter Waters Expansion",
         subject="Expansion pitch", author="Mina Okafor", keywords="pitch, expansion, fishing, P-005",
         created=dt.datetime(2025, 8, 12, 10, 0), modified=dt.datetime(2025, 8, 29, 16, 45),
         slides=[("Winter Waters", ["Ice fishing on a frozen fjord for the retired captain",
                                    "Augered holes, a heated hut and aurora nights"]),
                 ("New species", ["Arctic char, burbot and a legendary white sturgeon",
                                  "Journal sketches drawn by the original artist"]),
                 ("Scope", ["Four months, four developers", "Priced as a small paid expansion"])]),
    dict(slug="kite-season-sequel-pitch", title="Kite Season 2: Festival of Lanterns",
         subject="Sequel pitch", author="Leo Marsh", keywords="pitch, sequel, platformer, P-017",
         created=dt.datetime(2025, 5, 6, 14, 0), modified=dt.datetime(2025, 5, 9, 12, 0),
         slides=[("Festival of Lanterns", ["The kite chase continues at an autumn lantern festival",
                                           "Night levels lit by floating paper lanterns"]),
                 ("Two players", ["Cooperative mode with one kite and two runners",
                                  "Shared wind gusts reward coordination"]),
                 ("Audience", ["Families who loved the first game", "Drop-in play on one console"]),
                 ("Budget", ["Reuse of the wind engine keeps costs low",
                             "Twelve months with five developers"])]),
    dict(slug="starling-atlas-pitch", title="Starling Atlas: Vertical Slice Review",
         subject="Go or no-go review", author="Leo Marsh", keywords="pitch, review, cancelled, P-031",
         created=dt.datetime(2023, 12, 4, 11, 0), modified=dt.datetime(2024, 1, 15, 9, 30),
         slides=[("Starling Atlas", ["Chart a continent by following migrating flocks",
                                     "The atlas fills in only where birds have flown"]),
                 ("Findings", ["Flocking simulation costs 14 ms per frame on console",
                               "Playtesters loved the murmuration reveals"]),
                 ("Recommendation", ["Stop production and keep the cartography interface",
                                     "Revisit when the target hardware improves"])]),
]

# reportlab PDF reports.
REPORTS = [
    dict(slug="orchard-run-postmortem", title="Orchard Run Postmortem", author="Dana Whitlock",
         subject="Project postmortem", keywords="postmortem, racing, P-002",
         body=["Orchard Run shipped on time but over budget by roughly twelve percent, almost entirely because "
               "the suspension code was rewritten twice. The first version felt floaty on the terraced "
               "tracks; the second was precise but made the fruit cargo impossible to keep. The shipped "
               "handling is a compromise that lets crates wobble before they fall.",
               "What went right: the split-screen mode was built in the first month and every playtest used "
               "it, which kept the team focused on couch play. The seasonal night harvest update brought "
               "lapsed players back and cost less than a month of work.",
               "What went wrong: we underestimated the cost of console certification for three platforms at "
               "once. Next time we will stagger platform launches by at least six weeks."]),
    dict(slug="playtest-report-q2-2025", title="Quarterly Playtest Report Q2 2025", author="Priya Anand",
         subject="Playtest findings", keywords="playtest, research, Q2 2025",
         body=["This quarter the research team ran forty-two moderated sessions across Velvet Drift, Cinder "
               "Sprint and Yuzu Yard. Each session lasted ninety minutes and was recorded with consent.",
               "Velvet Drift: players understood the drift meter within five minutes, but two thirds missed "
               "the radio-show rival system entirely. We recommend a short scripted rivalry in the first "
               "district. Cinder Sprint: the top difficulty was described as relentless by most testers, "
               "which matches the design goal, but the second difficulty level felt too close to it.",
               "Yuzu Yard: testers asked to speed up time, yet those who played daily sessions for a week "
               "reported the strongest attachment to their trees. We advise keeping the slow clock."]),
    dict(slug="rooftop-relay-accessibility-audit", title="Accessibility Audit: Rooftop Relay",
         author="Sam Ortega", subject="Accessibility audit", keywords="accessibility, audit, platformer, P-009",
         body=["The audit reviewed Rooftop Relay against common game accessibility guidelines for motor, "
               "visual, auditory and cognitive needs.",
               "Strengths: a global speed slider from fifty to one hundred percent, fully remappable controls "
               "and hand-offs that can be triggered by a single held button. Subtitles cover all radio "
               "chatter between couriers.",
               "Gaps: the stamina bar relies on colour alone, and some night levels fall below the "
               "recommended contrast ratio for platform edges. Both are scheduled for the next patch."]),
    dict(slug="cozy-fishing-market-study", title="Market Study: Cozy Fishing Games", author="Mina Okafor",
         subject="Market research", keywords="market, fishing, research",
         body=["Relaxed fishing games have grown steadily since 2021, driven by players who want low-pressure "
               "sessions after work. Successful titles share three traits: no fail states, strong ambient "
               "audio and a collection journal.",
               "Price sensitivity is high. Most of the audience expects a launch price under twenty dollars "
               "and responds well to small paid expansions rather than subscriptions.",
               "Deepwater Patience fits this profile closely. The study recommends a winter expansion and a "
               "physical edition for collectors."]),
]

# HTML press pages: meta project_id joins a project (and so the roster).
PRESS = [
    dict(slug="deepwater-patience-launch", title="Deepwater Patience is out today", author="Fernwick Press Office",
         description="Launch announcement for the slow fishing game Deepwater Patience.",
         keywords="press, launch, fishing", project_id="P-005", published="2025-06-01",
         body=["Deepwater Patience, a slow fishing game about a retired ferry captain, is out today on PC and "
               "Switch.",
               "Cast a line, listen to the weather and fill a journal with more than eighty species sketched by "
               "hand. There is no timer and no score, only the sea and the next bite."]),
    dict(slug="yuzu-yard-announcement", title="Announcing Yuzu Yard", author="Fernwick Press Office",
         description="First announcement of the citrus nursery simulation Yuzu Yard.",
         keywords="press, announcement, citrus", project_id="P-022", published="2025-09-15",
         body=["Fernwick Studio and Lantern House are proud to announce Yuzu Yard, a gardening game about "
               "running a small citrus nursery in a mountain town.",
               "Graft yuzu and kumquat trees, wrap them in straw against the frost and trade preserves with "
               "your neighbours. Yuzu Yard is coming to PC, Switch and iOS in 2026."]),
    dict(slug="lantern-keeper-anniversary", title="Lantern Keeper turns five", author="Ada Finch",
         description="Anniversary update for the lighthouse puzzle game Lantern Keeper.",
         keywords="press, anniversary, update", project_id="P-003", published="2026-01-20",
         body=["Five years after the first lighthouse beam swept across the cape, Lantern Keeper receives a "
               "free anniversary update.",
               "The update adds twenty new night puzzles built around aurora light and a gallery of the "
               "original attic sketches."]),
    dict(slug="brine-and-bramble-release", title="Brine & Bramble sets sail", author="Ada Finch",
         description="Release news for the coastal foraging adventure Brine & Bramble.",
         keywords="press, release, adventure", project_id="P-023", published="2024-10-02",
         body=["Brine & Bramble, a coastal adventure about two foraging siblings, is now available on PC and "
               "Switch.",
               "Switch between rock pools and bramble lanes, cook your grandmother's recipes and uncover the "
               "story of the lighthouse cottage."]),
]

# Semantic questions: answered by one document's prose (grade 3); expected_answer must appear verbatim in it.
# `also` lists other documents that touch the answer (2 = strongly related, 1 = marginally).
SEMANTIC = [
    dict(id="tidal-lines-moon", doc="projects/tidal-lines.md", tags=["md", "puzzle"],
         question="In the island puzzle game where you shape the coastline, what decides how high the water climbs?",
         expected_answer="The moon phase"),
    dict(id="deepwater-line-tension", doc="projects/deepwater-patience.md", tags=["md", "fishing"],
         question="How does the fishing game communicate line tension to the player?",
         expected_answer="entirely through sound and controller rumble"),
    dict(id="grove-wardens-victory", doc="projects/grove-wardens.md", tags=["md", "strategy"],
         question="How do you win the woodland strategy game if there is no army?",
         expected_answer="a biodiversity index"),
    dict(id="sugar-glass-prototype", doc="projects/sugar-glass.md", tags=["md", "puzzle"],
         question="What did the team use to prototype the cooling model of the sugar sculpture game?",
         expected_answer="real isomalt"),
    dict(id="ember-hollow-generator", doc="projects/ember-hollow.md", tags=["md", "roguelike"],
         question="What did the team call the level generator in the volcano roguelike?",
         expected_answer="the quarryman"),
    dict(id="brine-bramble-siblings", doc="projects/brine-and-bramble.md", tags=["md", "malformed"],
         question="In the coastal foraging adventure, where are the siblings trying to reach?",
         expected_answer="the lighthouse cottage", also={"press/brine-and-bramble-release.html": 1}),
    dict(id="marmalade-revenue-share", doc="contracts/marmalade-circuit-publishing.docx", tags=["docx", "contract"],
         question="What share of net receipts does the publisher of the kitchen racer get before recoupment?",
         expected_answer="sixty percent"),
    dict(id="deepwater-port-framerate", doc="contracts/deepwater-patience-port.docx", tags=["docx", "contract"],
         question="What frame rate must the Switch port reach in handheld mode?",
         expected_answer="thirty frames per second"),
    dict(id="starling-flocking-cost", doc="pitches/starling-atlas-pitch.pptx", tags=["pptx", "pitch"],
         question="How expensive was the flocking simulation per frame on console in the bird exploration game?",
         expected_answer="14 ms per frame", also={"projects/starling-atlas.md": 2}),
    dict(id="orchard-run-overspend", doc="reports/orchard-run-postmortem.pdf", tags=["pdf", "postmortem"],
         question="Why did the fruit cart racer go over budget?",
         expected_answer="the suspension code was rewritten twice", also={"projects/orchard-run.md": 2}),
    dict(id="playtest-session-count", doc="reports/playtest-report-q2-2025.pdf", tags=["pdf", "playtest"],
         question="How many moderated playtest sessions did the research team run in the second quarter of 2025?",
         expected_answer="forty-two moderated sessions"),
    dict(id="lantern-keeper-anniversary-update", doc="press/lantern-keeper-anniversary.html", tags=["html", "press"],
         question="What does the Lantern Keeper anniversary update add?",
         expected_answer="twenty new night puzzles"),
]

# Aggregation questions: (id, question, query); `expected` is computed by `compute`.
AGGREGATION = [
    ("count-all", "How many documents are in the catalogue?", dict(op="count")),
    ("count-pdf", "How many PDF documents are in the catalogue?", dict(op="count", where={"type": "pdf"})),
    ("count-citrus", "How many projects have a citrus theme?", dict(op="count", where={"themes": "citrus"})),
    ("count-lantern-house", "How many documents have Lantern House as their publisher?",
     dict(op="count", where={"publisher": "Lantern House"})),
    ("count-signed-2025", "How many projects were signed in 2025?", dict(op="count", where={"signed": "2025"})),
    ("count-contracts-2025", "How many contracts were created in 2025?",
     dict(op="count", where={"category": "contract", "created": "2025"})),
    ("count-puzzle-docs", "How many documents in the catalogue are tagged with the puzzle genre?",
     dict(op="count", where={"genre": "puzzle"})),
    ("count-year-range", "How many projects are dated between 2022 and 2024?",
     dict(op="count", where={"year": {"gte": 2022, "lte": 2024}})),
    ("count-released-racing-platformer", "How many released projects are racing games or platformers?",
     dict(op="count", where={"status": "released", "genre": ["racing", "platformer"], "type": "md"})),
    ("count-big-budget", "How many projects have a budget above 300 thousand?",
     dict(op="count", where={"budget_k": {"gt": 300}})),
    ("list-fishing", "Which documents are tagged with the fishing genre?", dict(op="list", where={"genre": "fishing"})),
    ("list-cancelled", "Which projects were cancelled?", dict(op="list", where={"status": "cancelled"})),
    ("list-citrus-in-dev", "Which citrus-themed projects are still in development?",
     dict(op="list", where={"themes": "citrus", "status": "in development"})),
    ("list-press-2025", "Which press pages were published in 2025?",
     dict(op="list", where={"folder": "press", "published": "2025"})),
    ("list-p004-keywords", "Which documents have P-004 among their keywords?",
     dict(op="list", where={"keywords": "P-004"})),
    ("list-signed-h1-2025", "Which projects were signed between January and June 2025?",
     dict(op="list", where={"signed": {"gte": "2025-01-01", "lte": "2025-06-30"}})),
    ("distinct-publisher", "Which publishers appear in the catalogue?", dict(op="distinct", field="publisher")),
    ("distinct-genre", "What genres of game does the catalogue cover?", dict(op="distinct", field="genre")),
    ("distinct-year", "Which years do the projects span?", dict(op="distinct", field="year")),
    ("distinct-contract-authors", "Who wrote the contracts?",
     dict(op="distinct", field="author", where={"category": "contract"})),
    ("distinct-citrus-platforms", "On which platforms do the citrus-themed projects run?",
     dict(op="distinct", field="platforms", where={"themes": "citrus"})),
    ("group-publisher", "How many documents are there per publisher?", dict(op="group_by", by="publisher")),
    ("group-themes", "How many projects are there per theme?", dict(op="group_by", by="themes")),
    ("group-type", "How many documents of each file type does the catalogue hold?", dict(op="group_by", by="type")),
    ("group-status", "How many projects are released, in development or cancelled?",
     dict(op="group_by", by="status")),
    ("group-genre-md", "How many project notes are there per genre?",
     dict(op="group_by", by="genre", where={"type": "md"})),
    ("top-budget", "Which three projects have the biggest budgets?", dict(op="top_n", field="budget_k", limit=3)),
    ("top-signed", "Which five projects were signed most recently?", dict(op="top_n", field="signed", limit=5)),
    ("top-contracts-modified", "Which two contracts were modified most recently?",
     dict(op="top_n", field="modified", where={"category": "contract"}, limit=2)),
    ("lookup-sugar-glass-publisher", "Who publishes Sugar Glass (P-008)?",
     dict(op="lookup", field="publisher", where={"project_id": "P-008"})),
    ("lookup-paper-comets-genre", "What kind of game is Paper Comets (P-013)?",
     dict(op="lookup", field="genre", where={"project_id": "P-013"})),
    ("lookup-saltmarsh-themes", "What are the themes of Saltmarsh Tactics (P-010)?",
     dict(op="lookup", field="themes", where={"project_id": "P-010"})),
    ("lookup-kite-season-signed", "When was Kite Season (P-017) signed?",
     dict(op="lookup", field="signed", where={"project_id": "P-017"})),
    ("lookup-ember-hollow-budget", "What is the budget of Ember Hollow (P-012)?",
     dict(op="lookup", field="budget_k", where={"project_id": "P-012"})),
    ("lookup-quarry-kings-team", "Which team works on Quarry Kings (P-014)?",
     dict(op="lookup", field="team", where={"project_id": "P-014"})),
    ("lookup-starling-publisher", "Who was the publisher of Starling Atlas (P-031)?",
     dict(op="lookup", field="publisher", where={"project_id": "P-031"})),
    ("lookup-starling-status", "What is the status of Starling Atlas?",
     dict(op="lookup", field="status", where={"title": "Starling Atlas"})),
]
# Questions of the operations added later (aggregates, argmax/argmin, having, set operations, semi-joins,
# reconciliation, folded text): tagged `extended`.
EXTENDED_AGGREGATION = [
    ("count-lantern-house-lower", "How many documents does lantern house publish?",
     dict(op="count", where={"publisher": "lantern house"})),
    ("count-no-themes", "How many project notes state no themes?", dict(op="count", where={"type": "md",
                                                                                          "themes": {"empty": True}})),
    ("list-pc-and-switch", "Which projects run on both PC and Switch?",
     dict(op="list", where={"platforms": {"contains": ["PC", "Switch"]}})),
    ("sum-budget", "What is the total budget of all projects?", dict(op="sum", field="budget_k", where={"type": "md"})),
    ("avg-budget-puzzle", "What is the average budget of the puzzle projects?",
     dict(op="avg", field="budget_k", where={"type": "md", "genre": "puzzle"})),
    ("min-signed", "When was the earliest project signed?", dict(op="min", field="signed")),
    ("max-budget-released", "What is the largest budget of a released project?",
     dict(op="max", field="budget_k", where={"status": "released"})),
    ("count-distinct-publisher", "How many different publishers are there?",
     dict(op="count_distinct", field="publisher")),
    ("argmax-budget", "Which project has the biggest budget?",
     dict(op="argmax", field="budget_k", **{"return": "title"})),
    ("argmin-year", "Which projects are the oldest?", dict(op="argmin", field="year", **{"return": "title"})),
    ("argmax-platforms", "Which projects run on the most platforms?",
     dict(op="argmax", field="platforms", **{"return": "title"})),
    ("group-publisher-having", "Which publishers have more than 5 documents?",
     dict(op="group_by", by="publisher", having={"gt": 5})),
    ("group-publisher-budget", "What is the total budget per publisher?",
     dict(op="group_by", by="publisher", aggregate={"op": "sum", "field": "budget_k"}, where={"type": "md"})),
    ("group-genre-avg-budget-having", "Which genres have an average budget above 300 thousand?",
     dict(op="group_by", by="genre", aggregate={"op": "avg", "field": "budget_k"}, having={"gt": 300},
          where={"type": "md"})),
    ("intersect-puzzle-racing-publishers", "Which publishers have both puzzle and racing games?",
     dict(op="intersect", queries=[dict(op="distinct", field="publisher", where={"genre": "puzzle"}),
                                   dict(op="distinct", field="publisher", where={"genre": "racing"})])),
    ("union-publisher-genres", "Which genres do Lantern House or Copperleaf Publishing publish?",
     dict(op="union", queries=[dict(op="distinct", field="genre", where={"publisher": "Lantern House"}),
                               dict(op="distinct", field="genre", where={"publisher": "Copperleaf Publishing"})])),
    ("except-citrus-unreleased", "Which citrus-themed projects are not released?",
     dict(op="except", queries=[dict(op="list", where={"themes": "citrus"}),
                                dict(op="list", where={"status": "released"})])),
    ("semijoin-press-projects", "Which project notes have a press page?",
     dict(op="list", where={"type": "md", "project_id": {"in": dict(op="distinct", field="project_id",
                                                                    where={"folder": "press"})}})),
    ("semijoin-big-publishers", "How many projects come from publishers with more than 5 documents?",
     dict(op="count", where={"type": "md", "publisher": {"in": dict(op="group_by", by="publisher",
                                                                    having={"gt": 5})}})),
    ("nested-themes-of-biggest", "What are the themes of the project with the biggest budget?",
     dict(op="lookup", field="themes", where={"title": {"in": dict(op="argmax", field="budget_k", where={"type": "md"},
                                                                   **{"return": "title"})}})),
    ("reconciliation-mismatch", "Which documents contradict the roster?",
     dict(op="reconciliation", where={"status": "MISMATCH"})),
]

# ----------------------------------------------------------------------------------------------------- writers
FIXED_ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def normalise_zip(path: Path) -> None:
    """python-docx/pptx stamp zip members with the clock; rewrite them with a fixed time so bytes are stable."""
    with zipfile.ZipFile(path) as src:
        members = [(info.filename, src.read(info)) for info in src.infolist()]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            dst.writestr(info, data)
    path.write_bytes(buffer.getvalue())


def flow(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


def write_markdown(project: dict) -> None:
    lines = ["---", f"project_id: {project['project_id']}", f'title: "{project["title"]}"',
             f"publisher: {project['publisher']}", f"genre: {project['genre']}",
             # the malformed note loses the closing bracket of its themes list
             f"themes: {flow(project['themes'])[:-1] if project.get('malformed') else flow(project['themes'])}",
             f"year: {project['year']}", f"status: {project['status']}", f"budget_k: {project['budget_k']}",
             f"signed: {project['signed'].isoformat()}", f"platforms: {flow(project['platforms'])}", "---", "",
             f"# {project['title']}", ""]
    for paragraph in project["body"]:
        lines += [paragraph, ""]
    (DOCS / "projects" / f"{project['slug']}.md").write_text("\n".join(lines), encoding="utf-8")


def set_core(props, item: dict, category: str) -> None:
    props.title, props.subject, props.author = item["title"], item["subject"], item["author"]
    props.keywords, props.category = item["keywords"], category
    props.created, props.modified = item["created"], item["modified"]
    props.last_modified_by, props.revision = item["author"], 1
    props.comments, props.content_status, props.identifier, props.language, props.version = "", "final", "", "en-GB", "1"


def write_docx(contract: dict) -> None:
    import docx
    document = docx.Document()
    document.add_heading(contract["title"], level=1)
    for paragraph in contract["body"]:
        document.add_paragraph(paragraph)
    set_core(document.core_properties, contract, "contract")
    document.core_properties.last_printed = contract["modified"]
    path = DOCS / "contracts" / f"{contract['slug']}.docx"
    document.save(path)
    normalise_zip(path)


def write_pptx(pitch: dict) -> None:
    import pptx
    deck = pptx.Presentation()
    for title, bullets in pitch["slides"]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = bullets[0]
        for bullet in bullets[1:]:
            body.add_paragraph().text = bullet
    set_core(deck.core_properties, pitch, "pitch")
    deck.core_properties.last_printed = pitch["modified"]
    path = DOCS / "pitches" / f"{pitch['slug']}.pptx"
    deck.save(path)
    normalise_zip(path)


def write_pdf(report: dict) -> None:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer
    styles = getSampleStyleSheet()
    path = DOCS / "reports" / f"{report['slug']}.pdf"

    def info(canvas, _doc):
        canvas.setTitle(report["title"])
        canvas.setAuthor(report["author"])
        canvas.setSubject(report["subject"])
        canvas.setKeywords(report["keywords"])
        canvas.setCreator(f"{STUDIO} reporting")

    story = [Paragraph(html.escape(report["title"]), styles["Title"]), Spacer(1, 12)]
    for paragraph in report["body"]:
        story += [Paragraph(html.escape(paragraph), styles["BodyText"]), Spacer(1, 8)]
    SimpleDocTemplate(str(path), pagesize=A4, invariant=1).build(story, onFirstPage=info, onLaterPages=info)


def write_html(page: dict) -> None:
    e = html.escape
    metas = [("author", page["author"]), ("description", page["description"]), ("keywords", page["keywords"]),
             ("project_id", page["project_id"]), ("published", page["published"])]
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{e(page['title'])}</title>"]
    lines += [f'<meta name="{name}" content="{e(value)}">' for name, value in metas]
    lines += ["</head>", "<body>", f"<h1>{e(page['title'])}</h1>"]
    lines += [f"<p>{e(paragraph)}</p>" for paragraph in page["body"]]
    lines += ["</body>", "</html>", ""]
    (DOCS / "press" / f"{page['slug']}.html").write_text("\n".join(lines), encoding="utf-8")


def write_roster() -> None:
    columns = ["project_id", "name", "publisher", "genre", "team", "region"]
    with open(CATALOG / "roster.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(columns)
        for row in roster_rows():
            writer.writerow([row[column] for column in columns])


SOURCES_YAML = """\
# The catalog sample corpus: project notes, contracts, pitches, reports and press pages, and the roster of projects.
sources:
  catalog:
    roots: [docs]
roster:
  - path: roster.csv
    key: project_id
    document_key: project_id
    authoritative: [publisher, genre]
fields:
  year: {type: number, filterable: true}
  genre: {filterable: true, synonyms: [kind of game, game type]}
  publisher: {filterable: true, synonyms: [label, published by]}
  themes: {type: list, filterable: true, synonyms: [theme]}
  signed: {type: date}
  budget_k: {type: number, synonyms: [budget]}
  mood:
    from: classify
    labels:
      calm: relaxing, slow, peaceful, meditative play
      intense: fast, competitive, high pressure, action
"""

# ------------------------------------------------------------------------------ documents as the query tool sees them


def roster_rows() -> list[dict]:
    rows = [dict(project_id=p["project_id"], name=p["title"], publisher=p.get("roster_publisher", p["publisher"]),
                 genre=p.get("roster_genre", p["genre"]), team=p["team"], region=p["region"])
            for p in PROJECTS if p.get("in_roster", True)]
    return sorted(rows + ROSTER_ONLY, key=lambda row: row["project_id"])


def split_keywords(text: str) -> list[str]:
    return [part.strip() for part in re.split(r"[,;]", text) if part.strip()]


def documents() -> list[dict]:
    """Each document's fields (built-ins, own metadata, then the roster join), from the data tables."""
    docs = []

    def add(folder: str, slug: str, ext: str, fields: dict) -> None:
        path = f"{folder}/{slug}.{ext}"
        docs.append({"type": ext, "path": path, "folder": folder, "name": f"{slug}.{ext}", **fields})

    for p in PROJECTS:
        own = {} if p.get("malformed") else {k: p[k] for k in ("project_id", "title", "publisher", "genre", "themes",
                                                               "year", "status", "budget_k", "signed", "platforms")}
        add("projects", p["slug"], "md", own or {"title": p["title"]})
    for kind, items, category in (("contracts", CONTRACTS, "contract"), ("pitches", PITCHES, "pitch")):
        for c in items:
            add(kind, c["slug"], "docx" if kind == "contracts" else "pptx",
                dict(title=c["title"], subject=c["subject"], author=c["author"],
                     keywords=split_keywords(c["keywords"]), category=category,
                     created=c["created"].date(), modified=c["modified"].date()))
    for r in REPORTS:
        add("reports", r["slug"], "pdf", dict(title=r["title"], author=r["author"], subject=r["subject"],
                                              keywords=split_keywords(r["keywords"]), creator=f"{STUDIO} reporting"))
    for h in PRESS:
        add("press", h["slug"], "html", dict(title=h["title"], author=h["author"], description=h["description"],
                                             keywords=split_keywords(h["keywords"]), project_id=h["project_id"],
                                             published=D(h["published"])))
    roster = {row["project_id"]: row for row in roster_rows()}
    for doc in docs:
        row = roster.get(doc.get("project_id"))
        if row:
            doc.update(publisher=row["publisher"], genre=row["genre"])  # authoritative: the roster wins
            for column in ("name", "team", "region"):
                doc.setdefault(column, row[column])  # fill-ins (built-in `name` is the file name and stays)
    return docs


# ----------------------------------------------------------------------------------------------------- semantics


def as_text(value) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def as_bound(value, like, end: bool):
    if isinstance(like, dt.date):
        text = str(value)
        if re.fullmatch(r"\d{4}", text):
            return dt.date(int(text), 12, 31) if end else dt.date(int(text), 1, 1)
        return D(text)
    return float(value)


def equals(actual, wanted) -> bool:
    if isinstance(actual, dt.date):
        text = str(wanted)
        return actual.year == int(text) if re.fullmatch(r"\d{4}", text) else actual == D(text)
    if isinstance(actual, (int, float)) and not isinstance(actual, bool):
        try:
            return float(actual) == float(wanted)
        except (TypeError, ValueError):
            return False
    return folded(actual) == folded(wanted)  # text ignores case and runs of spaces


def folded(text) -> str:
    return " ".join(str(text).split()).lower()


def clause(docs: list[dict], actual, condition) -> bool:
    if isinstance(condition, dict) and "empty" in condition:
        return (actual in (None, [])) == condition["empty"]
    if actual is None:
        return False
    values = actual if isinstance(actual, list) else [actual]
    if isinstance(condition, dict) and "in" in condition:  # a semi-join: any value the query produces
        return any(equals(value, w) for value in values for w in produced(docs, condition["in"]))
    if isinstance(condition, dict) and "contains" in condition:  # a list holding every value
        return all(any(equals(value, w) for value in values) for w in condition["contains"])
    if isinstance(condition, dict):
        ops = {"gte": lambda a, b: a >= b, "lte": lambda a, b: a <= b, "gt": lambda a, b: a > b,
               "lt": lambda a, b: a < b}
        return all(ops[op](actual, as_bound(bound, actual, end=op in ("lte", "gt")))
                   for op, bound in condition.items())
    wanted = condition if isinstance(condition, list) else [condition]
    return any(equals(value, w) for value in values for w in wanted)


def matching(docs: list[dict], where: dict | None) -> list[dict]:
    return [d for d in docs if all(clause(docs, d.get(field), cond) for field, cond in (where or {}).items())]


def compute_count(docs, q):
    return {"count": len(matching(docs, q.get("where")))}


def compute_list(docs, q):
    return {"documents": sorted(d["path"] for d in matching(docs, q.get("where")))}


def values_of(doc, field) -> list:
    value = doc.get(field)
    if value is None:
        return []
    return list(dict.fromkeys(value)) if isinstance(value, list) else [value]


def compute_distinct(docs, q):
    return {"values": sorted({as_text(v) for d in matching(docs, q.get("where")) for v in values_of(d, q["field"])})}


def compute_top_n(docs, q):
    having = [d for d in matching(docs, q.get("where")) if d.get(q["field"]) is not None]
    ranked = sorted(having, key=lambda d: d[q["field"]], reverse=True)
    limit = q["limit"]
    assert len(ranked) <= limit or ranked[limit - 1][q["field"]] != ranked[limit][q["field"]], f"tie at cut: {q}"
    return {"documents": [d["path"] for d in ranked[:limit]]}


def compute_lookup(docs, q):
    found = matching(docs, q["where"])
    assert len(found) == 1, f"lookup must match exactly one document: {q} -> {[d['path'] for d in found]}"
    value = found[0][q["field"]]
    if isinstance(value, dt.date):
        return {"value": value.isoformat()}
    if isinstance(value, float) and value.is_integer():
        return {"value": int(value)}
    return {"value": value}


def as_answer(value):
    """A computed value as the tool states it: an integer without .0, a date as ISO text, a Decimal as a number."""
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def measured(docs: list[dict], op: str, field: str | None):
    """count (documents), sum, avg, min, max or count_distinct of `field` over `docs`; None when none has it."""
    if op == "count":
        return len(docs)
    values = [v for d in docs for v in values_of(d, field)]
    if op == "count_distinct":
        return len({as_text(v) for v in values})
    if not values:
        return None
    if op in ("min", "max"):
        return as_answer(min(values) if op == "min" else max(values))
    total = sum(Decimal(str(v)) for v in values)
    return as_answer(total if op == "sum" else float(total / len(values)))


def compute_aggregate(docs, q):
    value = measured([d for d in matching(docs, q.get("where")) if d.get(q["field"]) is not None], q["op"],
                     q["field"])
    return {"count": value} if q["op"] == "count_distinct" else {"value": value}


def best_documents(docs, q) -> list[dict]:
    """argmax/argmin: every document whose value (a list: its length) is at least as good as the limit-th best."""
    def score(d):
        value = d[q["field"]]
        return len(value) if isinstance(value, list) else value

    having = [d for d in matching(docs, q.get("where")) if d.get(q["field"]) not in (None, [])]
    ordered = sorted((score(d) for d in having), reverse=q["op"] == "argmax")
    if not ordered:
        return []
    cut = ordered[min(q.get("limit", 1), len(ordered)) - 1]
    return [d for d in having if (score(d) >= cut if q["op"] == "argmax" else score(d) <= cut)]


def compute_best(docs, q):
    return {"values": sorted(as_text(d[q.get("return", "title")]) for d in best_documents(docs, q))}


def groups_of(docs, q) -> dict[str, object]:
    """group value -> the aggregate of its documents (default: their count), only the groups passing `having`."""
    members: dict[str, list[dict]] = {}
    for d in matching(docs, q.get("where")):
        for v in values_of(d, q["by"]):
            members.setdefault(as_text(v), []).append(d)
    aggregate = q.get("aggregate", {"op": "count"})
    ops = {"gt": lambda a, b: a > b, "gte": lambda a, b: a >= b, "lt": lambda a, b: a < b,
           "lte": lambda a, b: a <= b, "eq": lambda a, b: a == b}
    found = {}
    for value, group in members.items():
        having = [d for d in group if aggregate["op"] == "count" or d.get(aggregate["field"]) is not None]
        measure = measured(having, aggregate["op"], aggregate.get("field")) if having else None
        if measure is not None and all(ops[op](measure, bound) for op, bound in q.get("having", {}).items()):
            found[value] = measure
    return found


def compute_group_by(docs, q):
    return {"groups": dict(sorted(groups_of(docs, q).items(), key=lambda kv: (-kv[1], kv[0])))}


def produced(docs, q) -> list:
    """The values a query produces for a semi-join or a set operation."""
    if q["op"] in ("argmax", "argmin"):
        return [v for d in best_documents(docs, q) for v in values_of(d, q.get("return", "title"))]
    if q["op"] == "group_by":
        return list(groups_of(docs, q))
    if q["op"] in ("intersect", "union", "except"):
        return compute_set(docs, q)["values"]
    return [v for d in matching(docs, q.get("where")) for v in values_of(d, q["field"])]


def compute_set(docs, q):
    first, second = q["queries"]
    if first["op"] == "list" and "field" not in first:  # sets of documents
        a, b = ({d["path"] for d in matching(docs, part.get("where"))} for part in (first, second))
        return {"documents": sorted({"intersect": a & b, "union": a | b, "except": a - b}[q["op"]])}
    a, b = ({folded(as_text(v)): as_text(v) for v in produced(docs, part)} for part in (first, second))
    kept = {"intersect": {k: a[k] for k in a if k in b}, "union": {**b, **a},
            "except": {k: a[k] for k in a if k not in b}}[q["op"]]
    return {"values": sorted(kept.values())}


def stated_fields(p: dict) -> dict:
    """What a project note states itself (before the roster's authoritative columns replace it)."""
    return {} if p.get("malformed") else {"publisher": p["publisher"], "genre": p["genre"]}


def compute_reconciliation(docs, q):
    """The documents whose own claim differs from the roster's authoritative value (MISMATCH), per field."""
    assert q["where"] == {"status": "MISMATCH"}, "only MISMATCH questions are computed"
    roster = {row["project_id"]: row for row in roster_rows()}
    return {"documents": [f"projects/{p['slug']}.md" for p in PROJECTS if p["project_id"] in roster
                          for name, value in stated_fields(p).items() if roster[p["project_id"]][name] != value]}


COMPUTE = {"count": compute_count, "list": compute_list, "distinct": compute_distinct, "group_by": compute_group_by,
           "top_n": compute_top_n, "lookup": compute_lookup, "sum": compute_aggregate, "avg": compute_aggregate,
           "min": compute_aggregate, "max": compute_aggregate, "count_distinct": compute_aggregate,
           "argmax": compute_best, "argmin": compute_best, "intersect": compute_set, "union": compute_set,
           "except": compute_set, "reconciliation": compute_reconciliation}


# ------------------------------------------------------------------------------------------------------- golden
GOLDEN_HEADER = """\
# Golden questions over golden/catalog (GENERATED by tools/build_catalog.py: do not edit by hand).
#
# semantic: relevance keys are path suffixes relative to golden/catalog/docs (3 = answers it directly, 2 = strongly
#   related, 1 = marginally; unlisted = 0); expected_answer appears verbatim in the grade-3 document.
# aggregation: `query` is the metadata query tool call; `expected` was computed by build_catalog.py from its data
#   tables with the query semantics: one document = one unit; fields are the built-ins (type, path, folder, name)
#   plus each document's own metadata (front matter, core properties, PDF info, HTML meta); documents whose
#   project_id is in roster.csv take the roster's publisher and genre (authoritative) and gain its team, region
#   (and name where not stated); roster-only rows are never counted. where clauses are ANDed: a scalar matches
#   equality (list fields: contains; text ignores case and runs of spaces), a list means any of, {gte, lte, gt, lt}
#   is a numeric or date range, a bare year matches a whole year of a date field, {contains: [...]} a list holding
#   every value, {empty: true} no value, {in: QUERY} any value the query produces. list answers compare as sets;
#   top_n answers are ordered best first; group_by counts each element of a list field once per document (or
#   aggregates another field per group, keeping the groups `having` lets through); sum/avg/min/max/count_distinct
#   run over the documents that have the field (numbers within a relative 1e-9); argmax/argmin give every document
#   tied with the best; set operations compare values like where clauses; reconciliation lists the documents whose
#   own claim the authoritative roster contradicts.
"""


def golden() -> dict:
    docs = documents()
    by_path = {d["path"]: d for d in docs}
    questions = []
    for s in SEMANTIC:
        assert s["doc"] in by_path and all(extra in by_path for extra in s.get("also", {})), s["id"]
        assert s["expected_answer"] in document_text(s["doc"]), (s["id"], s["expected_answer"])
        questions.append(dict(id=s["id"], question=s["question"], kind="semantic", relevance={s["doc"]: 3, **s.get("also", {})},
                              expected_answer=s["expected_answer"], tags=s["tags"]))
    for qid, question, query in AGGREGATION + EXTENDED_AGGREGATION:
        extended = ["extended"] if (qid, question, query) in EXTENDED_AGGREGATION else []
        questions.append(dict(id=qid, question=question, kind="aggregation", query=query,
                              expected=COMPUTE[query["op"]](docs, query), tags=["aggregation", query["op"], *extended]))
    return dict(name="catalog",
                description="Questions over golden/catalog (a game studio's catalogue in md, docx, pptx, pdf and html "
                            "with a roster.csv): semantic retrieval plus exact metadata aggregations.",
                questions=questions)


def document_text(path: str) -> str:
    folder, slug = path.split("/")[0], path.split("/")[1].rsplit(".", 1)[0]
    tables = {"projects": PROJECTS, "contracts": CONTRACTS, "reports": REPORTS, "press": PRESS}
    if folder == "pitches":
        pitch = next(p for p in PITCHES if p["slug"] == slug)
        return " ".join(t + " " + " ".join(b) for t, b in pitch["slides"])
    return " ".join(next(item for item in tables[folder] if item["slug"] == slug)["body"])


# --------------------------------------------------------------------------------------------------------- main


def main() -> None:
    for folder in ("projects", "contracts", "pitches", "reports", "press"):
        (DOCS / folder).mkdir(parents=True, exist_ok=True)
        for old in (DOCS / folder).iterdir():
            old.unlink()
    for project in PROJECTS:
        write_markdown(project)
    for contract in CONTRACTS:
        write_docx(contract)
    for pitch in PITCHES:
        write_pptx(pitch)
    for report in REPORTS:
        write_pdf(report)
    for page in PRESS:
        write_html(page)
    write_roster()
    (CATALOG / "sources.yaml").write_text(SOURCES_YAML, encoding="utf-8")
    body = yaml.safe_dump(golden(), sort_keys=False, allow_unicode=True, width=120, default_flow_style=None)
    GOLDEN.write_text(GOLDEN_HEADER + body, encoding="utf-8")
    print(f"wrote {len(documents())} documents, {len(roster_rows())} roster rows, {GOLDEN.name}")


if __name__ == "__main__":
    main()
