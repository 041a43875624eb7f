"""Delivery of budget alerts to chat platforms and webhooks over HTTP (httpx). Payloads and signatures are built
purely in ``modalscale.costmodel.notify_payloads``; this package only posts them and classifies the answers."""
