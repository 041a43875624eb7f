"""The request path of an InferenceService (issue 19): ``modalscale gateway``, one Deployment per service in front
of its Triton replicas.

Pure parts: ``features`` (a KServe v2 request, HTTP JSON, HTTP binary tensor extension or gRPC, to the per-request
features the autoscaler learns from: modality, image pixels from the encoded headers, text tokens, image content
digests; every bad payload raises ``PayloadError`` naming the field), ``affinity`` (consistent hashing with bounded
loads, so a repeated image goes to the replica whose embedding cache holds it) and ``tenants`` (bounded-cardinality
tenant labels). They do no I/O and read no clock. The server, EndpointSlice watch, balancer and CLI sit beside them.
"""
