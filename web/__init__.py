"""The static app `ember serve` serves (HTML, JS, CSS): files, no Python. A package so that an installed ember
carries it and `importlib.resources` finds it."""
