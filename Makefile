# quill — build, test, bench.
#   make            ./quill (CPU) and the demo GGUFs in models/
#   make test       every test, in a normal and an ASan+UBSan build
#   make bench      prefill/decode speed against the memory-bandwidth roofline
CC      ?= cc
PYTHON  ?= /usr/bin/python3
SHARED  ?= ../shared
BUILD   ?= build
OPT     ?= -O3 -march=native
SAN     ?=
CFLAGS  := $(OPT) $(SAN) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fopenmp -g $(CFLAGS)
LDLIBS  := -lm -fopenmp -lpcre2-8 $(SAN) $(LDLIBS)

LIB_SRC  = util.c gguf.c quant.c cpu.c kvcache.c model.c tokenizer.c sample.c
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
ASAN     = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

.PHONY: all quill models test test-fast test-asan bench clean
all: quill models

quill: $(BUILD)/quill
	cp $< $@

$(BUILD)/quill: $(BUILD)/main.o $(BUILD)/libquill.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libquill.a: $(LIB_OBJ)
	ar rcs $@ $^

$(BUILD)/%.o: %.c $(wildcard *.h) | $(BUILD)/tests
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libquill.a $(wildcard *.h)
	$(CC) $(CFLAGS) -I. -o $@ $< $(BUILD)/libquill.a $(LDLIBS)

$(BUILD)/tests:
	mkdir -p $@

# GGUF files of the models in ../shared, written by our own converter.
models:
	@if [ -d $(SHARED)/models ]; then $(PYTHON) models/convert.py --shared $(SHARED) --out models; \
	else echo "make models: $(SHARED)/models not found; skipping the demo models" >&2; fi

# The two runs one after the other (each builds with the jobs make was given).
test:
	$(MAKE) --no-print-directory test-fast
	$(MAKE) --no-print-directory test-asan

test-fast: $(BUILD)/quill $(TEST_BIN) models
	tests/run.sh $(BUILD) $(SHARED)

test-asan:
	$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -march=native" SAN="$(ASAN)" build/asan/quill $(TEST_SRC:tests/%.c=build/asan/tests/%)
	QUILL_SANITIZED=1 tests/run.sh build/asan $(SHARED)

bench: $(BUILD)/quill $(BUILD)/tests/test_tokenizer
	tests/bench.sh $(BUILD) $(SHARED)

clean:
	rm -rf build quill
