"""Runtime: the Triton multimodal model repository, server wrapper, client and load generator (no kopf)."""
