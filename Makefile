# quill — build, test, bench.
#   make            ./quill (CPU, and CUDA when nvcc is found; CUDA=0: CPU only) and the
#                   demo GGUFs in models/ (from ../shared; stories260K.gguf also ships)
#   make demo       ./quill generating from the shipped demo model
#   make test       every test, in a normal and an ASan+UBSan build (the latter CPU only),
#                   then the CUDA backend on the CPU through the SIMT emulation (both builds)
#   make fuzz       every fuzz target (tests/fuzz) for FUZZ_TIME seconds (default 300)
#   make soak       batch over 10,000 records and a 2,000-turn chat under ASan (slow)
#   make test-cuda  the CUDA backend against the CPU (needs a GPU)
#   make bench      prefill/decode speed against the memory-bandwidth roofline
#   make bench-peer quill beside llama.cpp's llama-bench on the same files, in rounds
#                   (BENCH_PEER_ARGS: tests/bench_peer.py's options, e.g. --build-peer)
#   make install    (after make) the binary, man page and bash/zsh completions under
#                   $(DESTDIR)$(PREFIX) (default /usr/local); make uninstall removes them
CC      ?= cc
PYTHON  ?= /usr/bin/python3
SHARED  ?= ../shared
BUILD   ?= build
OPT     ?= -O3 -march=native
SAN     ?=
CFLAGS  := $(OPT) $(SAN) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(CFLAGS)
LDLIBS  := -lm -lpthread -lpcre2-8 -ledit -lzstd -ljansson $(SAN) $(LDLIBS)

LIB_SRC  = util.c signals.c mapping.c gguf.c arch.c quant.c quant_x8.c quant_avx512.c quant_avx2.c quant_generic.c threads.c cpu.c cpu_attention.c moe.c kvcache.c model.c tokenizer.c tokenizer_vocab.c sample.c template.c jinja_lex.c jinja_parse.c jinja_value.c jinja_eval.c jinja_lib.c pcache.c lineread.c chat.c batch.c batch_record.c batch_openai.c batch_io.c spec.c textout.c modelpath.c grammar.c grammar_match.c grammar_vocab.c grammar_dfa.c json_schema.c logprobs.c reasoning.c
LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
ASAN     = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# CUDA: the backend's files (CU_SRC: kernels.cu and kernels_*.cu, sharing the
# private kernels_*.cuh headers) are compiled and linked into the same binary
# whenever nvcc is found (CUDA=0: CPU only). libcuda is not needed at link
# time, so the binary still runs where there is no GPU or driver (on the CPU,
# saying so).
NVCC      ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA      ?= $(if $(wildcard $(NVCC)),1,0)
CUDA_ARCH ?= sm_90
NVFLAGS   := -std=c++20 -O3 -g -arch=$(CUDA_ARCH) -DQUILL_CUDA_ARCH=$(subst sm_,,$(CUDA_ARCH)) \
             --Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror $(NVFLAGS)
# SIMT=1: the same CU_SRC compiled by g++ for the SIMT emulation (simt/),
# which runs the CUDA backend on the CPU for the tests: libsimt.so takes
# libcudart's place and the backend opens stand-ins of cuBLAS from $(BUILD)/lib.
SIMT      ?= 0
ifeq ($(SIMT),1)
override CUDA := 1
SIMT_CXX  := g++ -std=c++20 $(OPT) $(SAN) -g -fPIC -ffp-contract=off -D__CUDA_ARCH__=900 -DQUILL_SIMT -DQUILL_CUDA_ARCH=90 \
             -Wall -Wextra -Werror -Wno-unknown-pragmas -Isimt -I.
CFLAGS    += -DQUILL_SIMT
LDLIBS    += -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/lib:$$ORIGIN/../lib' -lsimt -ldl -lstdc++
else ifeq ($(CUDA),1)
# the CUDA runtime linked in (the binary starts where no toolkit is installed);
# cuBLAS is opened at backend start, found through the rpath or the loader's path
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -lrt -lpthread -ldl -lstdc++
endif
CU_SRC    = kernels.cu kernels_matvec.cu kernels_gemm.cu kernels_elementwise.cu kernels_attention.cu kernels_moe.cu \
            kernels_sample.cu kernels_selftest.cu
CU_OBJ    = $(CU_SRC:%.cu=$(BUILD)/%.o)
ifeq ($(CUDA),1)
CFLAGS    += -DQUILL_CUDA
LIB_OBJ   += $(CU_OBJ)
endif
# Objects remember whether they were built with CUDA (or the emulation): switching rebuilds them.
BUILD_CONFIG := $(BUILD)/config
$(shell mkdir -p $(BUILD)/tests && (echo 'CUDA=$(CUDA) $(CUDA_ARCH) SIMT=$(SIMT)' | cmp -s - $(BUILD_CONFIG) || \
        echo 'CUDA=$(CUDA) $(CUDA_ARCH) SIMT=$(SIMT)' > $(BUILD_CONFIG)))

# quill --version: the release, and the git commit of this checkout ("unknown" outside
# one). Only main.o gets them, and $(BUILD)/version is rewritten only when they change:
# a new commit (or the tree turning dirty) recompiles main.o alone. Not computed for
# install/uninstall, which may run under sudo (git refuses a checkout root does not own).
VERSION := 0.1.0
ifneq ($(filter-out install uninstall clean,$(or $(MAKECMDGOALS),all)),)
COMMIT  := $(shell [ -e .git ] && git describe --always --dirty 2>/dev/null || echo unknown)
$(shell echo '$(VERSION) $(COMMIT)' | cmp -s - $(BUILD)/version || echo '$(VERSION) $(COMMIT)' > $(BUILD)/version)
endif

.PHONY: all quill demo models test test-fast test-asan test-simt test-cuda bench bench-peer clean install uninstall \
        fuzz fuzz-build test-fuzz soak
all: quill models

quill: $(BUILD)/quill
	cp $< $@

# The demo: the 260K-parameter TinyStories model that ships in models/ (no ../shared needed).
demo: quill
	./quill -m models/stories260K.gguf -n 128 --temp 0.8 --seed 1 "Once upon a time"

$(BUILD)/quill: $(BUILD)/main.o $(BUILD)/libquill.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libquill.a: $(LIB_OBJ)
	ar rcs $@ $^

$(BUILD)/%.o: %.c $(wildcard *.h) | $(BUILD)/tests
	$(CC) $(CFLAGS) -c -o $@ $<

$(LIB_OBJ) $(BUILD)/main.o: $(BUILD_CONFIG)
$(BUILD)/main.o: $(BUILD)/version
$(BUILD)/main.o: CFLAGS += -DQUILL_VERSION='"$(VERSION)"' -DQUILL_COMMIT='"$(COMMIT)"' \
                          -DQUILL_CUDA_ARCH_NAME='"$(CUDA_ARCH)"'

ifeq ($(SIMT),1)
$(CU_OBJ): $(BUILD)/%.o: %.cu simt/rewrite.sh $(wildcard simt/*.h) $(wildcard *.h *.cuh) $(BUILD)/lib/libcublas.so.13
	simt/rewrite.sh $< $(BUILD)/$*_simt.cpp
	$(SIMT_CXX) -c -o $@ $(BUILD)/$*_simt.cpp

$(BUILD)/lib/libsimt.so: simt/runtime.cpp $(wildcard simt/*.h)
	mkdir -p $(BUILD)/lib
	$(SIMT_CXX) -shared -o $@ simt/runtime.cpp

$(BUILD)/tests/simt_selftest: tests/simt_selftest.cu simt/rewrite.sh $(wildcard simt/*.h) $(BUILD)/lib/libsimt.so
	simt/rewrite.sh tests/simt_selftest.cu $(BUILD)/tests/simt_selftest.cpp
	$(SIMT_CXX) -o $@ $(BUILD)/tests/simt_selftest.cpp -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lsimt

# the stand-ins under the two sonames the backend opens (libsimt.so loads them)
$(BUILD)/lib/libcublas.so.13: simt/cublas.cpp $(wildcard simt/*.h) $(BUILD)/lib/libsimt.so
	$(SIMT_CXX) -shared -Wl,-soname,libcublas.so.13 -o $@ simt/cublas.cpp -L$(BUILD)/lib -lsimt
	$(SIMT_CXX) -shared -Wl,-soname,libcublasLt.so.13 -o $(BUILD)/lib/libcublasLt.so.13 simt/cublas.cpp -L$(BUILD)/lib -lsimt
else
$(CU_OBJ): $(BUILD)/%.o: %.cu $(wildcard *.h *.cuh) | $(BUILD)/tests
	$(NVCC) $(NVFLAGS) -c -o $@ $<
endif

$(BUILD)/tests/%: tests/%.c $(BUILD)/libquill.a $(wildcard *.h) $(wildcard tests/*.h)
	$(CC) $(CFLAGS) -I. -o $@ $< $(BUILD)/libquill.a $(LDLIBS)

$(BUILD)/tests:
	mkdir -p $@

# GGUF files of the models in ../shared, written by our own converter.
models:
	@if [ -d $(SHARED)/models ]; then $(PYTHON) models/convert.py --shared $(SHARED) --out models; \
	else echo "make models: $(SHARED)/models not found; skipping the demo models" >&2; fi

# The runs one after the other (each builds with the jobs make was given).
test:
	$(MAKE) --no-print-directory test-fast
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-fuzz
	$(MAKE) --no-print-directory test-simt

test-fast: $(BUILD)/quill $(TEST_BIN) models
	tests/run.sh $(BUILD) $(SHARED)

test-asan:
	$(MAKE) --no-print-directory BUILD=build/asan CUDA=0 OPT="-O1 -march=native" SAN="$(ASAN)" build/asan/quill $(TEST_SRC:tests/%.c=build/asan/tests/%)
	QUILL_SANITIZED=1 tests/run.sh build/asan $(SHARED)

# Fuzzing: every tests/fuzz/fuzz_NAME.c is a libFuzzer target (clang, ASan+UBSan) over
# the library built with coverage in build/fuzz (tests/fuzz/fuzz.h says how to add one).
# tests/fuzz/run.sh replays each target's regression inputs and seeds, then fuzzes it:
# make fuzz for FUZZ_TIME seconds a target, make test (test-fuzz) for FUZZ_TEST_TIME.
FUZZ_CC        ?= clang
FUZZ_TIME      ?= 300
FUZZ_TEST_TIME ?= 20
FUZZ_SAN        = -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
FUZZ_TARGETS    = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
# clang, unlike gcc, also warns of unused static inline functions (the per-ISA kernels have
# some); passed through the environment, as CFLAGS's last part (after -Wall)
FUZZ_WNO        = -Wno-unused-function
fuzz-build:
	CFLAGS="$(FUZZ_WNO)" $(MAKE) --no-print-directory BUILD=build/fuzz CUDA=0 CC=$(FUZZ_CC) OPT="-O1 -march=native" SAN="$(FUZZ_SAN)" \
		$(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
fuzz: fuzz-build
	tests/fuzz/run.sh build/fuzz $(FUZZ_TIME) $(FUZZ_TARGETS)
test-fuzz: fuzz-build
	tests/fuzz/run.sh build/fuzz $(FUZZ_TEST_TIME) $(FUZZ_TARGETS)

$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(BUILD)/libquill.a $(wildcard *.h)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -I. -o $@ $< $(BUILD)/libquill.a $(LDLIBS)

# Long runs of the ASan+UBSan build (tests/soak.sh): batch over 10,000 records, a 2,000-turn chat.
soak: models
	$(MAKE) --no-print-directory BUILD=build/asan CUDA=0 OPT="-O1 -march=native" SAN="$(ASAN)" build/asan/quill
	tests/soak.sh build/asan

# The CUDA backend on the CPU through the SIMT emulation (simt/, no GPU needed):
# a normal and an ASan+UBSan build (tests/simt.sh).
SIMT_PROGS = quill tests/test_backend_ops tests/test_cuda_model tests/simt_selftest
test-simt:
	$(MAKE) --no-print-directory BUILD=build/simt SIMT=1 $(SIMT_PROGS:%=build/simt/%)
	tests/simt.sh build/simt $(SHARED)
	$(MAKE) --no-print-directory BUILD=build/simt-asan SIMT=1 OPT="-O1 -march=native" SAN="$(ASAN)" \
		$(SIMT_PROGS:%=build/simt-asan/%)
	QUILL_SANITIZED=1 tests/simt.sh build/simt-asan $(SHARED)

# On a machine with a GPU: every CUDA op against the CPU op, CPU-vs-CUDA
# logits and the goldens with --gpu, compute-sanitizer on a short run.
test-cuda: $(BUILD)/quill $(BUILD)/tests/test_backend_ops $(BUILD)/tests/test_cuda_model models
	tests/cuda.sh $(BUILD) $(SHARED)

bench: $(BUILD)/quill $(BUILD)/tests/test_tokenizer $(BUILD)/tests/test_template $(BUILD)/tests/test_grammar
	tests/bench.sh $(BUILD) $(SHARED)

bench-peer: $(BUILD)/quill
	$(PYTHON) tests/bench_peer.py --quill $(BUILD)/quill --shared $(SHARED) $(BENCH_PEER_ARGS)

# Installs what make built (and builds nothing, so that sudo make install leaves the
# build tree as it was). tests/t_docs.sh checks the man page and completions against --help.
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALLED = bin/quill share/man/man1/quill.1 share/bash-completion/completions/quill \
            share/zsh/site-functions/_quill
install:
	@test -x $(BUILD)/quill || { echo "make install: $(BUILD)/quill is not built; run make first" >&2; exit 1; }
	install -D -m 755 $(BUILD)/quill $(DESTDIR)$(PREFIX)/bin/quill
	install -D -m 644 doc/quill.1 $(DESTDIR)$(PREFIX)/share/man/man1/quill.1
	install -D -m 644 completions/quill.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/quill
	install -D -m 644 completions/_quill $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_quill

uninstall:
	rm -f $(INSTALLED:%=$(DESTDIR)$(PREFIX)/%)

clean:
	rm -rf build quill
