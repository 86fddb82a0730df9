"""Suite-wide plugins: the guard that makes unexpected skips fail in CI."""

pytest_plugins = ["tests.required"]
