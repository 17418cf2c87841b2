"""Tables in: a scores set read and joined to its items and pairs (ties, selections, ids), and the
evidence rows and synthetic rewards built on them. Nothing is imported here: each module imports
the ones it needs.
"""
