"""Schemathesis hooks for `make fuzz` (loaded through SCHEMATHESIS_HOOKS by scripts/fuzz/run)."""

import schemathesis

# tus PATCH bodies (and creation-with-upload) are raw bytes under tus' own media type.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")
