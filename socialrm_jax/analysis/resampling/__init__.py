"""Resampling: the stratified bootstrap over items (or a dataset's clusters) and the reported values
and intervals made from its rows. Nothing is imported here: each module imports the ones it needs.
"""
