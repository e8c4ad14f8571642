#!/usr/bin/env bash
# -m NAME and `quill list` (modelpath.c): each place's layout built in a
# temporary home from the shared GGUF files: $QUILL_MODELS folders, the
# Hugging Face hub cache (snapshot links to blobs, two revisions), llama.cpp's
# cache with its manifests, ollama's manifests and sha256 blobs, LM Studio's
# folders. A name must pick the file the layout says, byte for byte.
set -u
. "$(dirname "$0")/lib.sh"
G=$(realpath "$SHARED/models/gguf")
QUILL=$(realpath "$QUILL"); export QUILL
for f in stories260K stories260K-Q8_0 stories260K-Q4_0 stories260K-F16; do
    [ -f "$G/$f.gguf" ] || { echo "FAIL $G/$f.gguf missing"; exit 1; }
done
unset QUILL_MODELS HF_HOME HF_HUB_CACHE HUGGINGFACE_HUB_CACHE XDG_CACHE_HOME LLAMA_CACHE OLLAMA_MODELS
export HOME="$tmp/home"
mkdir -p "$HOME"

q() { "$QUILL" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; echo $? >"$tmp/rc"; }
rc() { [ "$(cat "$tmp/rc")" = "$1" ]; }
err_has() { grep -q -- "$1" "$tmp/err"; }
# the file `quill info NAME` opened (its first line is "PATH: GGUF v3, ...")
resolved() { "$QUILL" info "$1" 2>/dev/null | head -1 | sed 's/: GGUF v[0-9].*//'; }
picks() {  # NAME FILE: NAME resolves to a file with FILE's bytes
    local p; p=$(resolved "$1")
    [ -n "$p" ] && cmp -s "$p" "$2" || { echo "     $1 -> '${p}', expected the bytes of $2"; return 1; }
}
picks_path() {  # NAME PATH: NAME resolves to exactly PATH
    local p; p=$(resolved "$1")
    [ "$p" = "$2" ] || { echo "     $1 -> '$p', expected '$2'"; return 1; }
}

# ---- the layouts ----------------------------------------------------------------
# $QUILL_MODELS: two folders; dup.gguf in both (ambiguous), a subfolder, a corrupt file
QM1="$tmp/qm1" QM2="$tmp/qm2"
mkdir -p "$QM1/sub" "$QM2"
cp "$G/stories260K.gguf" "$QM1/story-a.gguf"
cp "$G/stories260K-Q8_0.gguf" "$QM1/sub/story-deep.gguf"
cp "$G/stories260K-Q4_0.gguf" "$QM1/dup.gguf"
cp "$G/stories260K-Q8_0.gguf" "$QM2/dup.gguf"
ln -s "$QM1/story-a.gguf" "$QM2/story-a-link.gguf"   # the same file twice counts once
head -c 4096 "$G/stories260K.gguf" >"$QM2/broken.gguf"  # truncated: its tensors run past the end
export QUILL_MODELS="$QM1:$QM2"

# Hugging Face: acme/tiny-GGUF with two revisions; refs/main names r2, whose
# tiny-Q8_0.gguf is the Q8_0 file (r1's was the F16 one); plus a one-file repo
# with a vision projector beside it
HF="$HOME/.cache/huggingface/hub"
R="$HF/models--acme--tiny-GGUF"
mkdir -p "$R/blobs" "$R/refs" "$R/snapshots/r1" "$R/snapshots/r2"
cp "$G/stories260K-F16.gguf" "$R/blobs/b-f16"
cp "$G/stories260K-Q8_0.gguf" "$R/blobs/b-q8"
cp "$G/stories260K-Q4_0.gguf" "$R/blobs/b-q4"
ln -s ../../blobs/b-f16 "$R/snapshots/r1/tiny-Q8_0.gguf"
ln -s ../../blobs/b-q8 "$R/snapshots/r2/tiny-Q8_0.gguf"
ln -s ../../blobs/b-q4 "$R/snapshots/r2/tiny-Q4_0.gguf"
touch -d '2020-01-01' "$R/snapshots/r2"   # older than r1: refs/main must still win
echo r2 >"$R/refs/main"
S="$HF/models--solo--one-GGUF"
mkdir -p "$S/blobs" "$S/snapshots/abc"
cp "$G/stories260K-Q4_0.gguf" "$S/blobs/x1"
cp "$G/stories260K-F16.gguf" "$S/blobs/x2"
ln -s ../../blobs/x1 "$S/snapshots/abc/one.Q4_0.gguf"
ln -s ../../blobs/x2 "$S/snapshots/abc/mmproj-one-f16.gguf"

# llama.cpp: -hf acme/lcpp-GGUF:Q4_0 (and :latest) downloaded ORG_NAME_FILE.gguf
LC="$HOME/.cache/llama.cpp"
mkdir -p "$LC"
cp "$G/stories260K-Q4_0.gguf" "$LC/acme_lcpp-GGUF_lcpp-Q4_0.gguf"
echo '{"ggufFile":{"rfilename":"lcpp-Q4_0.gguf","size":1}}' >"$LC/manifest=acme=lcpp-GGUF=Q4_0.json"
cp "$LC/manifest=acme=lcpp-GGUF=Q4_0.json" "$LC/manifest=acme=lcpp-GGUF=latest.json"
cp "$G/stories260K-F16.gguf" "$LC/loose.gguf"

# ollama: storyteller:latest and storyteller:q8 (the model layer is the blob)
OL="$HOME/.ollama/models"
mkdir -p "$OL/blobs" "$OL/manifests/registry.ollama.ai/library/storyteller"
ollama_add() {  # TAG FILE
    local sha; sha=$(sha256sum "$2" | cut -d' ' -f1)
    cp "$2" "$OL/blobs/sha256-$sha"
    printf '{"schemaVersion":2,"config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:%s","size":1},"layers":[{"mediaType":"application/vnd.ollama.image.license","digest":"sha256:%s","size":1},{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:%s","size":%d}]}' \
        "$(printf 0%.0s {1..64})" "$(printf 1%.0s {1..64})" "$sha" "$(stat -c %s "$2")" \
        >"$OL/manifests/registry.ollama.ai/library/storyteller/$1"
    echo "$OL/blobs/sha256-$sha"
}
BLOB_LATEST=$(ollama_add latest "$G/stories260K.gguf")
BLOB_Q8=$(ollama_add q8 "$G/stories260K-Q8_0.gguf")

# LM Studio: PUBLISHER/REPO/FILE, and story-a.gguf again (shadowed by $QUILL_MODELS)
LM="$HOME/.lmstudio/models/lmstudio-community/studio-GGUF"
mkdir -p "$LM"
cp "$G/stories260K-Q8_0.gguf" "$LM/studio-Q8_0.gguf"
mkdir -p "$HOME/.lmstudio/models/someone/misc"
cp "$G/stories260K-F16.gguf" "$HOME/.lmstudio/models/someone/misc/story-a.gguf"

# ---- each place resolves --------------------------------------------------------
check "\$QUILL_MODELS: a file name" picks story-a "$G/stories260K.gguf"
check "\$QUILL_MODELS: the name with .gguf" picks story-a.gguf "$G/stories260K.gguf"
check "\$QUILL_MODELS: a file in a subfolder, by its name" picks story-deep "$G/stories260K-Q8_0.gguf"
check "\$QUILL_MODELS: ... and by its path below the folder" picks sub/story-deep "$G/stories260K-Q8_0.gguf"
check "HF: ORG/NAME:QUANT" picks acme/tiny-GGUF:Q4_0 "$G/stories260K-Q4_0.gguf"
check "HF: NAME:QUANT, any case" picks TINY-gguf:q4_0 "$G/stories260K-Q4_0.gguf"
check "HF: refs/main's revision wins over a newer one" picks tiny-GGUF:Q8_0 "$G/stories260K-Q8_0.gguf"
check "HF: ORG/NAME/FILE.gguf" picks acme/tiny-GGUF/tiny-Q4_0.gguf "$G/stories260K-Q4_0.gguf"
check "HF: the file name" picks tiny-Q8_0 "$G/stories260K-Q8_0.gguf"
check "HF: the path is the snapshot's link (to the blob)" \
    bash -c "[ -L '$(resolved acme/tiny-GGUF:Q4_0)' ] && [ '$(readlink -f "$(resolved acme/tiny-GGUF:Q4_0)")' = '$(readlink -f "$R/blobs/b-q4")' ]"
check "HF: NAME of a one-model repo (the mmproj file does not count)" picks one-GGUF "$G/stories260K-Q4_0.gguf"
check "HF: the mmproj file by its own name" picks mmproj-one-f16 "$G/stories260K-F16.gguf"
check "llama.cpp: ORG/NAME (manifest tag latest)" picks acme/lcpp-GGUF "$G/stories260K-Q4_0.gguf"
check "llama.cpp: NAME:TAG (manifest)" picks lcpp-GGUF:Q4_0 "$G/stories260K-Q4_0.gguf"
check "llama.cpp: a loose file by name" picks loose "$G/stories260K-F16.gguf"
check "ollama: NAME is NAME:latest's model blob" picks_path storyteller "$BLOB_LATEST"
check "ollama: NAME:TAG" picks_path storyteller:q8 "$BLOB_Q8"
check "ollama: HOST/NS/NAME:TAG" picks_path registry.ollama.ai/library/storyteller:q8 "$BLOB_Q8"
check "LM Studio: REPO" picks studio-GGUF "$G/stories260K-Q8_0.gguf"
check "LM Studio: PUBLISHER/REPO:QUANT" picks lmstudio-community/studio-GGUF:Q8_0 "$G/stories260K-Q8_0.gguf"

# ---- precedence, paths ----------------------------------------------------------
check "precedence: \$QUILL_MODELS before LM Studio" picks story-a "$G/stories260K.gguf"
check "precedence: without \$QUILL_MODELS, LM Studio's story-a" \
    env -u QUILL_MODELS bash -c "$(declare -f resolved picks); picks story-a '$G/stories260K-F16.gguf'"
check "an existing path is used as is" picks_path "$QM1/dup.gguf" "$QM1/dup.gguf"
(cd "$QM1" && "$QUILL" info dup.gguf >"$tmp/rel" 2>&1)
check "a relative path that exists wins over the name" grep -q '^dup.gguf: GGUF' "$tmp/rel"
check "HF_HUB_CACHE moves the hub" env HF_HUB_CACHE="$tmp/nohub" bash -c "! '$QUILL' info tiny-GGUF:Q4_0 >/dev/null 2>&1"
mkdir -p "$tmp/xdg/llama.cpp" && cp "$G/stories260K-Q8_0.gguf" "$tmp/xdg/llama.cpp/xdgfile.gguf"
check "XDG_CACHE_HOME moves ~/.cache" env XDG_CACHE_HOME="$tmp/xdg" bash -c "$(declare -f resolved picks); picks xdgfile '$G/stories260K-Q8_0.gguf'"
mkdir -p "$tmp/ol2" && cp -r "$OL/manifests" "$OL/blobs" "$tmp/ol2/"
check "OLLAMA_MODELS moves the store" env OLLAMA_MODELS="$tmp/ol2" bash -c "$(declare -f resolved); [ \"\$(resolved storyteller)\" = '$tmp/ol2/blobs/$(basename "$BLOB_LATEST")' ]"

# generation through a name is generation from the file
"$QUILL" -m "$G/stories260K.gguf" --temp 0 -n 8 -q "Once upon a time" >"$tmp/direct" 2>/dev/null
q -m storyteller --temp 0 -n 8 -q "Once upon a time"
check "generate with -m NAME: exit 0" rc 0
check "generate with -m NAME: the same text as with the path" cmp -s "$tmp/out" "$tmp/direct"
q -m story-a --draft storyteller:latest --temp 0 -n 8 -q "Once upon a time"
check "--draft takes a name too" cmp -s "$tmp/out" "$tmp/direct"

# ---- ambiguity, missing names ---------------------------------------------------
q -m tiny-GGUF "Once"
check "ambiguous: exit 1" rc 1
check "ambiguous: the first line says so, naming the place" bash -c "head -1 '$tmp/err' | grep -q \"^quill: model 'tiny-GGUF' is ambiguous: 2 files in the Hugging Face cache\""
check "ambiguous: a line per candidate, each with a name that picks it" \
    bash -c "[ \$(wc -l <'$tmp/err') = 3 ] && grep -q '^  tiny-GGUF:Q4_0 .*snapshots/r2/tiny-Q4_0.gguf\$' '$tmp/err' && grep -q '^  tiny-GGUF:Q8_0 .*snapshots/r2/tiny-Q8_0.gguf\$' '$tmp/err'"
check "ambiguous: stdout empty" test ! -s "$tmp/out"
q -m dup "Once"
check "ambiguous in \$QUILL_MODELS: exit 1, both paths listed" \
    bash -c "rc=\$(cat '$tmp/rc'); [ \$rc = 1 ] && grep -q '^  $QM1/dup.gguf\$' '$tmp/err' && grep -q '^  $QM2/dup.gguf\$' '$tmp/err'"
q -m story-a-link "Once" -n 1 -q
check "a link to a file seen already is the same model, not an ambiguity" rc 0
q -m no-such-model "Once"
check "missing: exit 1, one line" bash -c "[ \$(cat '$tmp/rc') = 1 ] && [ \$(wc -l <'$tmp/err') = 1 ]"
check "missing: names the model" err_has "^quill: model 'no-such-model' not found"
check "missing: says where it looked" \
    bash -c "grep -q '\$QUILL_MODELS $QM1, $QM2; the Hugging Face cache ~/.cache/huggingface/hub; llama.cpp.s cache ~/.cache/llama.cpp; ollama.s store ~/.ollama/models; LM Studio.s models ~/.lmstudio/models, ~/.cache/lm-studio/models (absent)' '$tmp/err'"
q -m storyteller:7b "Once"
check "ollama: a tag that is not there is missing" err_has "model 'storyteller:7b' not found"
env -u QUILL_MODELS HOME="$tmp/empty" "$QUILL" -m x "hi" 2>"$tmp/err" >/dev/null
check "missing, nothing anywhere: \$QUILL_MODELS (unset), places (absent)" \
    bash -c "grep -q '\$QUILL_MODELS (unset); the Hugging Face cache ~/.cache/huggingface/hub (absent)' '$tmp/err'"
q -m "$tmp/nothere.gguf" "Once"
check "a missing path: the usual cannot-open error naming it" \
    bash -c "[ \$(cat '$tmp/rc') = 1 ] && grep -q 'nothere.gguf: cannot open' '$tmp/err'"
q -m acme/tiny-GGUF/nothere.gguf "Once"
check "a missing ORG/NAME/FILE.gguf: cannot open" err_has "nothere.gguf: cannot open"

# ---- quill list -------------------------------------------------------------------
q list
check "list: exit 0" rc 0
check "list: nothing on stderr" test ! -s "$tmp/err"
check "list: a header" bash -c "head -1 '$tmp/out' | grep -q '^NAME  *SIZE  *ARCH  *TYPE  *SOURCE  *PATH\$'"
check "list: every file once (15), the link and the older revision not again" test "$(tail -n +2 "$tmp/out" | wc -l)" = 15
check "list: models with arch llama, a size and a type" \
    bash -c "grep -q '^story-a  *1.1 MiB  llama  *F32  *quill  *$QM1/story-a.gguf\$' '$tmp/out' && grep -q '^tiny-GGUF:Q8_0  *370.3 KiB  llama  *Q8_0  *huggingface ' '$tmp/out'"
check "list: every place" bash -c "for s in quill huggingface llama.cpp ollama lmstudio; do grep -q \"  \$s  \" '$tmp/out' || exit 1; done"
check "list: the corrupt file with its error" \
    bash -c "grep -q '^broken  *4.0 KiB  -  *-  *quill  *$QM2/broken.gguf  (error: .*)\$' '$tmp/out'"
check "list: the ambiguous dups by their paths" bash -c "grep -q '^$QM1/dup.gguf ' '$tmp/out' && grep -q '^$QM2/dup.gguf ' '$tmp/out'"
check "list: the shadowed LM Studio story-a by a name that picks it" \
    bash -c "grep -q '^misc .* lmstudio .*/misc/story-a.gguf\$' '$tmp/out'"
q list --json
check "list --json: one object per model, sorted by name, each NAME resolves to its path" "$PY" -c "
import json, subprocess, sys
rows = [json.loads(l) for l in open('$tmp/out')]
names = [r['name'] for r in rows]
assert names == sorted(names, key=lambda s: (s.lower(), s)), names
assert len(rows) == 15, len(rows)
for r in rows:
    assert set(r) >= {'name', 'path', 'source', 'size', 'architecture', 'type'}, r
    if 'error' in r:
        assert r['name'] == 'broken' and r['architecture'] is None, r
        continue
    assert r['architecture'] == 'llama' and r['size'] > 100000, r
    out = subprocess.run(['$QUILL', 'info', r['name']], capture_output=True, text=True).stdout
    got = out.split(': GGUF', 1)[0]
    assert got == r['path'], (r['name'], got, r['path'])
hf = [r for r in rows if r['name'] == 'tiny-GGUF:Q4_0'][0]
assert hf['size'] == $(stat -c %s "$G/stories260K-Q4_0.gguf") and hf['type'] == 'Q4_0', hf
"
"$QUILL" list 2>"$tmp/err" | head -1 >/dev/null; ps=${PIPESTATUS[0]}
check "list | head: exit 0, quiet" bash -c "[ $ps = 0 ] && [ ! -s '$tmp/err' ]"
env -u QUILL_MODELS HOME="$tmp/empty" "$QUILL" list >"$tmp/out" 2>"$tmp/err"; echo $? >"$tmp/rc"
check "list, no models: exit 0, stdout empty" bash -c "[ \$(cat '$tmp/rc') = 0 ] && [ ! -s '$tmp/out' ]"
check "list, no models: says where it looked" err_has "no models found; looked in"
q list --bogus
check "list --bogus: exit 1, one line" bash -c "[ \$(cat '$tmp/rc') = 1 ] && [ \$(wc -l <'$tmp/err') = 1 ]"
exit $fail
