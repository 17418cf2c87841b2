"""The metrics every dataset gets (gold-pair accuracy, length confound, calibration, distribution
bias, best-of-n) and the verdicts over them. Nothing is imported here: each module imports the
ones it needs.
"""
