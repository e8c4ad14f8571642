#!/usr/bin/env bash
# tests/t_backend_harness.sh — build/tests/test_backend_ops with its "device" side on
# cpu.c (QUILL_TEST_DEVICE=cpu): on a machine without a GPU this still checks cpu.c's
# kv_store and attention (fp16 and q8 KV caches) against the test's float64 references,
# and the harness that `make test-cuda` runs on a GPU. A CPU-only build skips it.
set -u
exec env QUILL_TEST_DEVICE=cpu "$BUILD/tests/test_backend_ops"
