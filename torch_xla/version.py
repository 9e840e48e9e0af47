# The upstream API release implemented, plus this implementation's own revision.
__version__ = "2.9.0+jax"
