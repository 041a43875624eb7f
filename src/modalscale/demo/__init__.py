"""``modalscale demo``: the product's main job end to end on this machine (see :mod:`modalscale.demo.run`)."""
