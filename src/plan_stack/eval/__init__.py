"""Evaluation: recording live topics, replaying bags through the graph, metrics and reports."""
