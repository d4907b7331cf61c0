"""A flow's graph of states and its renderings.

Why not networkx (issue 16): the design once asked for the flow graph to be built with networkx,
and it was declared as a dependency but imported nowhere. It is no longer a dependency, because it
would earn its place nowhere:

* the data-flow analysis (:mod:`flowctl.check.dataflow`) is a forward fixpoint over scope shapes in
  reverse post-order, not a dominator question, and it runs inside ``flowctl validate``, which must
  stay light: ``import networkx`` alone costs 120-190 ms on this machine, against about 33 ms for
  importing the whole CLI (``python -X importtime``);
* rendering (:mod:`flowctl.graph.flowgraph`) writes DOT and mermaid text itself and hands DOT to
  Graphviz for SVG/PNG; networkx draws nothing that Graphviz does not;
* the graph diff (:mod:`flowctl.diff`) matches nodes and edges by their stable ids: set operations
  on dicts;
* reachability, traps and routes (:mod:`flowctl.check.topology`, :mod:`flowctl.testing.suggest`)
  are breadth-first searches of a few lines over flows of tens of states.

``tests/test_imports.py`` and ``tests/test_graph.py`` keep ``networkx`` in the list of modules the
``validate`` path must not load, so bringing it back onto that path fails a test.
"""
