"""Runs: evaluating a model over a config and recording it (`runner`, `recording`), the transfer check
(`transfer_check`) and its statistics (`gap_statistics`), history queries and plots (`history`),
paired comparison (`compare`) and re-grading stored runs (`rescore`).
"""
