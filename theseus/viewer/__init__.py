"""Views of a store for people: figures of runs' metrics (``plot``), drawn without JAX."""
