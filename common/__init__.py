"""What every part of the product shares: JSON logging (:mod:`common.log`), broker URLs
(:mod:`common.url`) and durations (:mod:`common.duration`).

Nothing here imports ``broker``, ``ha_agent``, ``qpid_ha_cli`` or ``analytics``: the arrows
point only into this package.
"""
