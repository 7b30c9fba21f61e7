"""Sweeps over policy knobs (`hpa sweep`), the one-pass capacity curve, and `hpa plan`."""

from analyzer.sweep.stack_distance import CapacityCurve, capacity_curve

__all__ = ["CapacityCurve", "capacity_curve"]
