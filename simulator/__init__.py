"""Stand-ins for the external systems capvco-web talks to, served over real HTTP.

Nothing under ``capvco_web`` imports this package: tests and the demo start a simulator as
a separate process and point the real clients at it.
"""
