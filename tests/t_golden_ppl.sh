#!/usr/bin/env bash
# llama.cpp / llama2.c reference outputs in $SHARED/golden: see tests/golden.py.
exec "${PYTHON:-/usr/bin/python3}" tests/golden.py "$QUILL" "$SHARED" ppl
