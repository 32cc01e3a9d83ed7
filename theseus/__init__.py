"""theseus: a JAX language-model trainer on an event-sourced store.

>>> from theseus import Store, Node, quick, init
"""

from theseus.quick import init, quick
from theseus.store import Node, Store

__all__ = ["Store", "Node", "quick", "init"]
