"""Shared test builders (importable because pytest puts tests/ on sys.path)."""
