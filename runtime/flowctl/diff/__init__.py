"""The semantic diff of two projects and its renderings."""
