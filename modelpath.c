// modelpath.c — see modelpath.h. A catalog is filled place by place (a name
// stops the search at the first place that has it); each file found becomes
// one entry with the names it answers to, the preferred first.
#include "modelpath.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "gguf.h"
#include "quant.h"
#include "util.h"

enum { MP_QUILL, MP_HF, MP_LLAMACPP, MP_OLLAMA, MP_LMSTUDIO, MP_N_PLACES };

static const char *const place_label[MP_N_PLACES] = {"$QUILL_MODELS", "the Hugging Face cache", "llama.cpp's cache",
                                                     "ollama's store", "LM Studio's models"};
static const char *const place_id[MP_N_PLACES] = {"quill", "huggingface", "llama.cpp", "ollama", "lmstudio"};

#define MP_MAX_DIRS 16   // folders per place ($QUILL_MODELS may name several)
#define FOLDER_DEPTH 4   // subfolder levels searched in a $QUILL_MODELS folder or an HF snapshot

typedef struct {
    char *path;        // the GGUF file as found (HF: the snapshot's link to its blob)
    char *rel;         // its path below the folder it was found in (HF: in the snapshot)
    char *stem;        // its file name without .gguf
    char *repo;        // "ORG/NAME" (HF, LM Studio; NULL elsewhere and for mmproj-*): takes ":QUANT"
    char *repo_short;  // the NAME of repo
    char **names;      // [n_names] exact names that pick it, the preferred first
    int n_names, cap_names;
    int place;         // MP_*
    dev_t dev;         // the file behind links: one entry per file and place
    ino_t ino;
    uint64_t size;
} mp_model;

typedef struct {
    const char *home;                        // $HOME (NULL: unset), for "~" in messages
    char *dirs[MP_N_PLACES][MP_MAX_DIRS];    // each place's folders, in search order
    int n_dirs[MP_N_PLACES];
    int models_set;                          // $QUILL_MODELS is set
    mp_model *m;                             // [n] the models of the places scanned so far
    int n, cap;
    int scanned;                             // places [0, scanned) are in m
    int oom;                                 // an allocation failed: the catalog is incomplete
} catalog;

// ---- small helpers ----------------------------------------------------------

static const char *env(const char *name) {  // NULL when unset or empty
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

// A formatted, malloc'd string; NULL (and c->oom) when out of memory.
static char *cat_printf(catalog *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *cat_printf(catalog *c, const char *fmt, ...) {
    char *s;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) return c->oom = 1, NULL;
    return s;
}

static int has_gguf_ext(const char *name) {
    size_t n = strlen(name);
    return n > 5 && !strcasecmp(name + n - 5, ".gguf");
}

// The quantization label a file name (without .gguf) ends in: the text after
// its last '-' or '.', when that starts with a letter and has a digit
// ("llama-2-7b.Q4_K_M" -> "Q4_K_M"; "Llama-3.2-1B" has none).
static const char *quant_label(const char *stem) {
    const char *p = stem + strlen(stem);
    while (p > stem && p[-1] != '-' && p[-1] != '.') p--;
    if (p == stem || !((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z') || !strpbrk(p, "0123456789")) return NULL;
    return p;
}

// QUANT of "REPO:QUANT": the file name (without .gguf) ends in -QUANT or .QUANT.
static int quant_matches(const char *stem, const char *q) {
    size_t n = strlen(stem), k = strlen(q);
    return k > 0 && k < n && !strcasecmp(stem + n - k, q) && (stem[n - k - 1] == '-' || stem[n - k - 1] == '.');
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The entries of folder dir but those starting with '.', sorted; NULL (and
// *n = 0) when it cannot be read.
static char **list_dir(catalog *c, const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = NULL;
    int cap = 0;
    for (struct dirent *e; !c->oom && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) {
            char **nv = realloc(v, sizeof *v * (size_t)(cap ? 2 * cap : 16));
            if (!nv) {
                c->oom = 1;
                break;
            }
            v = nv, cap = cap ? 2 * cap : 16;
        }
        if (!(v[*n] = strdup(e->d_name))) c->oom = 1;
        else ++*n;
    }
    closedir(d);
    if (*n) qsort(v, (size_t)*n, sizeof *v, cmp_str);
    return v;
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

// Calls fn for each file below dir (links followed), in name order, going
// down at most depth levels of subfolders; gguf: only files named *.gguf.
// rel is dir's path below the folder the walk started in (NULL there).
typedef void walk_fn(catalog *c, void *ctx, const char *path, const char *rel, const struct stat *st);
static void walk(catalog *c, const char *dir, const char *rel, int depth, int gguf, walk_fn *fn, void *ctx) {
    int n;
    char **names = list_dir(c, dir, &n);
    for (int i = 0; i < n; i++) {
        char *path = cat_printf(c, "%s/%s", dir, names[i]);
        char *sub = rel ? cat_printf(c, "%s/%s", rel, names[i]) : cat_printf(c, "%s", names[i]);
        struct stat st;
        if (path && sub && !stat(path, &st)) {
            if (S_ISDIR(st.st_mode) && depth > 0) walk(c, path, sub, depth - 1, gguf, fn, ctx);
            else if (S_ISREG(st.st_mode) && (!gguf || has_gguf_ext(names[i]))) fn(c, ctx, path, sub, &st);
        }
        free(path), free(sub);
    }
    free_list(names, n);
}

static int is_dir(const char *path) {
    struct stat st;
    return !stat(path, &st) && S_ISDIR(st.st_mode);
}

// ---- the catalog --------------------------------------------------------------

static void add_dir(catalog *c, int p, char *dir) {
    if (dir && c->n_dirs[p] < MP_MAX_DIRS) c->dirs[p][c->n_dirs[p]++] = dir;
    else free(dir);
}

// Each place's folders, found from the environment as the tool that fills it does.
static void catalog_init(catalog *c) {
    *c = (catalog){.home = env("HOME")};
    const char *home = c->home, *v;
    char *cache = env("XDG_CACHE_HOME") ? cat_printf(c, "%s", env("XDG_CACHE_HOME"))
                  : home                ? cat_printf(c, "%s/.cache", home)
                                        : NULL;
    if ((v = getenv("QUILL_MODELS"))) {
        c->models_set = 1;
        for (const char *p = v; *p;) {
            size_t k = strcspn(p, ":");
            if (k) add_dir(c, MP_QUILL, cat_printf(c, "%.*s", (int)k, p));
            p += k + (p[k] == ':');
        }
    }
    if ((v = env("HF_HUB_CACHE")) || (v = env("HUGGINGFACE_HUB_CACHE"))) add_dir(c, MP_HF, cat_printf(c, "%s", v));
    else if ((v = env("HF_HOME"))) add_dir(c, MP_HF, cat_printf(c, "%s/hub", v));
    else if (cache) add_dir(c, MP_HF, cat_printf(c, "%s/huggingface/hub", cache));
    if ((v = env("LLAMA_CACHE"))) add_dir(c, MP_LLAMACPP, cat_printf(c, "%s", v));
    else if (cache) add_dir(c, MP_LLAMACPP, cat_printf(c, "%s/llama.cpp", cache));
    if ((v = env("OLLAMA_MODELS"))) add_dir(c, MP_OLLAMA, cat_printf(c, "%s", v));
    else if (home) add_dir(c, MP_OLLAMA, cat_printf(c, "%s/.ollama/models", home));
    if (home) {  // LM Studio's own folders (it does not read XDG_CACHE_HOME)
        add_dir(c, MP_LMSTUDIO, cat_printf(c, "%s/.lmstudio/models", home));
        add_dir(c, MP_LMSTUDIO, cat_printf(c, "%s/.cache/lm-studio/models", home));
    }
    free(cache);
}

static void entry_free(mp_model *m) {
    free(m->path), free(m->rel), free(m->stem), free(m->repo), free(m->repo_short);
    free_list(m->names, m->n_names);
}

static void catalog_free(catalog *c) {
    for (int p = 0; p < MP_N_PLACES; p++)
        for (int d = 0; d < c->n_dirs[p]; d++) free(c->dirs[p][d]);
    for (int i = 0; i < c->n; i++) entry_free(&c->m[i]);
    free(c->m);
}

// The entry of the file at path (st: after links) in place p: the one this
// place already has for that file, else a new one; NULL when out of memory.
// The pointer is good until the next add_model.
static mp_model *add_model(catalog *c, int p, const char *path, const char *rel, const struct stat *st) {
    for (int i = 0; i < c->n; i++)
        if (c->m[i].place == p && c->m[i].dev == st->st_dev && c->m[i].ino == st->st_ino) return &c->m[i];
    if (c->n == c->cap) {
        mp_model *nm = realloc(c->m, sizeof *nm * (size_t)(c->cap ? 2 * c->cap : 32));
        if (!nm) return c->oom = 1, NULL;
        c->m = nm, c->cap = c->cap ? 2 * c->cap : 32;
    }
    const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
    mp_model *m = &c->m[c->n];
    *m = (mp_model){.path = strdup(path), .rel = strdup(rel),
                    .stem = strndup(base, strlen(base) - (has_gguf_ext(base) ? 5 : 0)),
                    .place = p, .dev = st->st_dev, .ino = st->st_ino, .size = (uint64_t)st->st_size};
    if (!m->path || !m->rel || !m->stem) return entry_free(m), c->oom = 1, NULL;
    c->n++;
    return m;
}

// Adds a name (formatted) to m, unless m has it already.
static void add_name(catalog *c, mp_model *m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_name(catalog *c, mp_model *m, const char *fmt, ...) {
    char *s;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) {
        c->oom = 1;
        return;
    }
    for (int i = 0; i < m->n_names; i++)
        if (!strcasecmp(m->names[i], s)) {
            free(s);
            return;
        }
    if (m->n_names == m->cap_names) {
        char **nv = realloc(m->names, sizeof *nv * (size_t)(m->cap_names ? 2 * m->cap_names : 8));
        if (!nv) {
            free(s);
            c->oom = 1;
            return;
        }
        m->names = nv, m->cap_names = m->cap_names ? 2 * m->cap_names : 8;
    }
    m->names[m->n_names++] = s;
}

// The length of a name without its .gguf.
static int stem_len(const char *s) { return (int)strlen(s) - (has_gguf_ext(s) ? 5 : 0); }

// A file found in a folder at rel: its file name and its path below the
// folder, each without and with .gguf.
static void add_file_names(catalog *c, mp_model *m, const char *rel) {
    const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
    add_name(c, m, "%.*s", stem_len(base), base);
    add_name(c, m, "%.*s", stem_len(rel), rel);
    add_name(c, m, "%s", base);
    add_name(c, m, "%s", rel);
}

// A file of repository repo ("ORG/NAME"; Hugging Face, LM Studio), file its
// path in the repository: NAME, ORG/NAME, NAME:QUANT, ORG/NAME:QUANT (but for
// vision projectors, which are never what a model's name means), then its file
// name and ORG/NAME/FILE.
static void add_repo_names(catalog *c, mp_model *m, const char *repo, const char *file) {
    const char *slash = strchr(repo, '/'), *name = slash ? slash + 1 : repo;
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    char *stem = cat_printf(c, "%.*s", stem_len(base), base);
    const char *q = stem ? quant_label(stem) : NULL;
    if (strncasecmp(base, "mmproj", 6) && !m->repo) {
        m->repo = cat_printf(c, "%s", repo);
        m->repo_short = cat_printf(c, "%s", name);
        add_name(c, m, "%s", name);
        add_name(c, m, "%s", repo);
        if (q) add_name(c, m, "%s:%s", name, q), add_name(c, m, "%s:%s", repo, q);
    }
    free(stem);
    add_name(c, m, "%.*s", stem_len(base), base);
    add_name(c, m, "%s", base);
    add_name(c, m, "%s/%s", repo, file);
    add_name(c, m, "%s/%.*s", repo, stem_len(file), file);
}

// ---- the places ------------------------------------------------------------------

static void on_folder_file(catalog *c, void *ctx, const char *path, const char *rel, const struct stat *st) {
    mp_model *m = add_model(c, *(const int *)ctx, path, rel, st);
    if (m) add_file_names(c, m, rel);
}

static void scan_quill_models(catalog *c) {
    const int p = MP_QUILL;
    for (int d = 0; d < c->n_dirs[p]; d++) walk(c, c->dirs[p][d], NULL, FOLDER_DEPTH, 1, on_folder_file, (void *)&p);
}

typedef struct {
    const char *repo;  // "ORG/NAME"
    int first;         // the repository's first entry in the catalog
} hf_repo;

static void on_hf_file(catalog *c, void *ctx, const char *path, const char *rel, const struct stat *st) {
    const hf_repo *h = ctx;
    for (int i = h->first; i < c->n; i++)  // in a revision walked before: that one counts
        if (!strcmp(c->m[i].rel, rel)) return;
    mp_model *m = add_model(c, MP_HF, path, rel, st);
    if (m) add_repo_names(c, m, h->repo, rel);
}

typedef struct {
    char *name;     // the revision's folder in snapshots/
    time_t mtime;
    int main;       // refs/main names it
} hf_snapshot;

static int cmp_snapshot(const void *pa, const void *pb) {  // refs/main first, then the newest
    const hf_snapshot *a = pa, *b = pb;
    if (a->main != b->main) return b->main - a->main;
    if (a->mtime != b->mtime) return a->mtime > b->mtime ? -1 : 1;
    return strcmp(a->name, b->name);
}

// One repository folder, models--ORG--NAME: the GGUF files of its snapshots;
// of a file in several revisions, the one refs/main names, else the newest.
static void scan_hf_repo(catalog *c, const char *dir, const char *repo) {
    char head[128] = "", *ref = cat_printf(c, "%s/refs/main", dir), *snaps = cat_printf(c, "%s/snapshots", dir);
    FILE *f = ref ? fopen(ref, "r") : NULL;
    if (f && !fgets(head, sizeof head, f)) head[0] = 0;
    if (f) fclose(f);
    head[strcspn(head, " \t\r\n")] = 0;
    int n_names = 0;
    char **names = snaps ? list_dir(c, snaps, &n_names) : NULL;
    hf_snapshot *s = calloc((size_t)n_names + 1, sizeof *s);
    int n = s ? n_names : 0;
    if (!s) c->oom = 1;
    for (int i = 0; i < n; i++) {
        char *p = cat_printf(c, "%s/%s", snaps, names[i]);
        struct stat st;
        s[i] = (hf_snapshot){.name = names[i], .main = !strcmp(names[i], head),
                             .mtime = p && !stat(p, &st) ? st.st_mtime : 0};
        free(p);
    }
    qsort(s, (size_t)n, sizeof *s, cmp_snapshot);
    hf_repo h = {.repo = repo, .first = c->n};
    for (int i = 0; i < n; i++) {
        char *p = cat_printf(c, "%s/%s", snaps, s[i].name);
        if (p) walk(c, p, NULL, FOLDER_DEPTH, 1, on_hf_file, &h);
        free(p);
    }
    free(s), free(ref), free(snaps);
    free_list(names, n_names);
}

static void scan_hf(catalog *c) {
    if (!c->n_dirs[MP_HF]) return;
    const char *hub = c->dirs[MP_HF][0];
    int n;
    char **names = list_dir(c, hub, &n);
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i], "models--", 8) || !names[i][8]) continue;
        char *repo = cat_printf(c, "%s", names[i] + 8), *dir = cat_printf(c, "%s/%s", hub, names[i]);
        char *sep = repo ? strstr(repo, "--") : NULL;  // ORG--NAME; hub names never hold "--"
        if (sep) *sep = '/', memmove(sep + 1, sep + 2, strlen(sep + 2) + 1);
        if (repo && dir) scan_hf_repo(c, dir, repo);
        free(repo), free(dir);
    }
    free_list(names, n);
}

// manifest=ORG=NAME=TAG.json: `llama-cli -hf ORG/NAME:TAG` downloaded the
// manifest's ggufFile.rfilename as ORG_NAME_RFILENAME ('/' as '_').
static void add_llamacpp_manifest(catalog *c, const char *dir, const char *fname) {
    size_t len = strlen(fname);
    if (len <= 14 || strncmp(fname, "manifest=", 9) || strcmp(fname + len - 5, ".json")) return;
    char *spec = cat_printf(c, "%.*s", (int)(len - 14), fname + 9);  // ORG=NAME=TAG
    char *org = spec, *name = spec ? strchr(spec, '=') : NULL, *tag = name ? strchr(name + 1, '=') : NULL;
    if (!tag || strchr(tag + 1, '=') || name == org || tag == name + 1 || !tag[1]) {
        free(spec);
        return;
    }
    *name++ = 0, *tag++ = 0;
    char *mpath = cat_printf(c, "%s/%s", dir, fname);
    json_t *root = mpath ? json_load_file(mpath, 0, NULL) : NULL;
    const char *rf = json_string_value(json_object_get(json_object_get(root, "ggufFile"), "rfilename"));
    char *local = rf ? cat_printf(c, "%s_%s_%s", org, name, rf) : NULL, *path = NULL;
    for (char *p = local; p && *p; p++)
        if (*p == '/') *p = '_';
    struct stat st;
    if (local && (path = cat_printf(c, "%s/%s", dir, local)) && !stat(path, &st) && S_ISREG(st.st_mode)) {
        mp_model *m = add_model(c, MP_LLAMACPP, path, local, &st);
        if (m && !strcmp(tag, "latest")) add_name(c, m, "%s", name), add_name(c, m, "%s/%s", org, name);
        if (m) add_name(c, m, "%s:%s", name, tag), add_name(c, m, "%s/%s:%s", org, name, tag);
    }
    json_decref(root);
    free(spec), free(mpath), free(local), free(path);
}

// The manifests first, so that their names come before the mangled file names.
static void scan_llamacpp(catalog *c) {
    if (!c->n_dirs[MP_LLAMACPP]) return;
    const char *dir = c->dirs[MP_LLAMACPP][0];
    const int p = MP_LLAMACPP;
    int n;
    char **names = list_dir(c, dir, &n);
    for (int i = 0; i < n; i++) add_llamacpp_manifest(c, dir, names[i]);
    free_list(names, n);
    walk(c, dir, NULL, 0, 1, on_folder_file, (void *)&p);
}

// The blob a manifest's model layer names: "sha256:HEX" -> blobs/sha256-HEX
// (NULL when there is none or the digest is not 64 hex digits).
static char *ollama_blob(catalog *c, const char *store, json_t *manifest) {
    size_t i;
    json_t *layer;
    json_array_foreach(json_object_get(manifest, "layers"), i, layer) {
        const char *type = json_string_value(json_object_get(layer, "mediaType"));
        const char *digest = json_string_value(json_object_get(layer, "digest"));
        if (!type || strcmp(type, "application/vnd.ollama.image.model")) continue;
        if (!digest || strncmp(digest, "sha256:", 7) || strlen(digest) != 71 ||
            strspn(digest + 7, "0123456789abcdef") != 64)
            return NULL;
        return cat_printf(c, "%s/blobs/sha256-%s", store, digest + 7);
    }
    return NULL;
}

// manifests/HOST/NS/NAME/TAG: NAME:TAG, NS/NAME:TAG, HOST/NS/NAME:TAG, each
// also without ":TAG" when TAG is latest.
static void on_ollama_manifest(catalog *c, void *ctx, const char *path, const char *rel, const struct stat *st) {
    (void)st;
    char host[256], ns[256], name[256], tag[256], end;
    if (sscanf(rel, "%255[^/]/%255[^/]/%255[^/]/%255[^/]%c", host, ns, name, tag, &end) != 4) return;
    json_t *root = json_load_file(path, 0, NULL);
    char *blob = root ? ollama_blob(c, ctx, root) : NULL;
    struct stat bst;
    if (blob && !stat(blob, &bst) && S_ISREG(bst.st_mode)) {
        mp_model *m = add_model(c, MP_OLLAMA, blob, rel, &bst);
        int latest = !strcmp(tag, "latest");
        if (m && latest) add_name(c, m, "%s", name);
        if (m) add_name(c, m, "%s:%s", name, tag);
        if (m && latest) add_name(c, m, "%s/%s", ns, name);
        if (m) add_name(c, m, "%s/%s:%s", ns, name, tag);
        if (m && latest) add_name(c, m, "%s/%s/%s", host, ns, name);
        if (m) add_name(c, m, "%s/%s/%s:%s", host, ns, name, tag);
    }
    free(blob);
    json_decref(root);
}

static void scan_ollama(catalog *c) {
    if (!c->n_dirs[MP_OLLAMA]) return;
    char *manifests = cat_printf(c, "%s/manifests", c->dirs[MP_OLLAMA][0]);
    if (manifests) walk(c, manifests, NULL, 3, 0, on_ollama_manifest, c->dirs[MP_OLLAMA][0]);
    free(manifests);
}

// PUBLISHER/REPO/FILE.gguf: named as a repository's file; elsewhere as a folder's.
static void on_lmstudio_file(catalog *c, void *ctx, const char *path, const char *rel, const struct stat *st) {
    (void)ctx;
    mp_model *m = add_model(c, MP_LMSTUDIO, path, rel, st);
    const char *s1 = strchr(rel, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    char *repo = m && s2 ? cat_printf(c, "%.*s", (int)(s2 - rel), rel) : NULL;
    if (repo) add_repo_names(c, m, repo, s2 + 1);
    else if (m) add_file_names(c, m, rel);
    free(repo);
}

static void scan_lmstudio(catalog *c) {
    for (int d = 0; d < c->n_dirs[MP_LMSTUDIO]; d++) walk(c, c->dirs[MP_LMSTUDIO][d], NULL, 2, 1, on_lmstudio_file, NULL);
}

// Scans the places up to p (those not scanned yet), in order.
static void scan_upto(catalog *c, int p) {
    static void (*const scan[MP_N_PLACES])(catalog *) = {scan_quill_models, scan_hf, scan_llamacpp, scan_ollama,
                                                          scan_lmstudio};
    while (c->scanned <= p) scan[c->scanned++](c);
}

// ---- matching ------------------------------------------------------------------

static int model_matches(const mp_model *m, const char *q) {
    for (int i = 0; i < m->n_names; i++)
        if (!strcasecmp(m->names[i], q)) return 1;
    const char *colon = strrchr(q, ':');
    if (!colon || !m->repo || !m->repo_short) return 0;
    size_t r = (size_t)(colon - q);
    int repo = (strlen(m->repo) == r && !strncasecmp(q, m->repo, r)) ||
               (strlen(m->repo_short) == r && !strncasecmp(q, m->repo_short, r));
    return repo && quant_matches(m->stem, colon + 1);
}

// How many entries of place p name q matches; the first max indices go to idx.
static int find_in_place(const catalog *c, int p, const char *q, int *idx, int max) {
    int k = 0;
    for (int i = 0; i < c->n; i++)
        if (c->m[i].place == p && model_matches(&c->m[i], q)) {
            if (k < max) idx[k] = i;
            k++;
        }
    return k;
}

// Whether -m q picks exactly entry e: no place before e's matches q, and in
// e's place only e does.
static int picks(const catalog *c, const char *q, const mp_model *e) {
    for (int p = 0; p <= e->place; p++) {
        int idx, k = find_in_place(c, p, q, &idx, 1);
        if (k) return p == e->place && k == 1 && &c->m[idx] == e;
    }
    return 0;
}

// The name that -m takes for exactly e: its first name that picks it, else its path.
static const char *model_name(const catalog *c, const mp_model *e) {
    for (int i = 0; i < e->n_names; i++)
        if (picks(c, e->names[i], e)) return e->names[i];
    return e->path;
}

// ---- messages --------------------------------------------------------------------

// Bytes that would garble a terminal line (controls, invalid UTF-8) as '?';
// keep_nl keeps '\n'.
static void sanitize(char *s, int keep_nl) {
    for (size_t n = strlen(s), i = 0; i < n;) {
        long bad = utf8_invalid_at(s + i, n - i);
        size_t end = bad < 0 ? n : i + (size_t)bad;
        for (; i < end; i++)
            if (((unsigned char)s[i] < 0x20 && !(keep_nl && s[i] == '\n')) || s[i] == 0x7f) s[i] = '?';
        if (i < n) s[i++] = '?';
    }
}

// Messages are written with fprintf into open_memstream's buffer *s; msg_close
// returns it fit for a terminal, or NULL when out of memory.
static char *msg_close(FILE *f, char **s) {
    if (fclose(f) || !*s) return free(*s), NULL;
    sanitize(*s, 1);
    return *s;
}

// A path with $HOME shown as "~".
static void msg_path(FILE *b, const catalog *c, const char *path) {
    size_t h = c->home ? strlen(c->home) : 0;
    if (h > 1 && !strncmp(path, c->home, h) && path[h] == '/') fprintf(b, "~%s", path + h);
    else fprintf(b, "%s", path);
}

// "$QUILL_MODELS (unset); the Hugging Face cache ~/.cache/huggingface/hub; ..."
// with every place's folders, each that does not exist marked (absent).
static void msg_places(FILE *b, const catalog *c) {
    for (int p = 0; p < MP_N_PLACES; p++) {
        if (p == MP_QUILL && !c->n_dirs[p]) fprintf(b, "%s (%s)", place_label[p], c->models_set ? "empty" : "unset");
        if (!c->n_dirs[p]) continue;  // a place under an unset $HOME
        fprintf(b, "%s%s ", p ? "; " : "", place_label[p]);
        for (int d = 0; d < c->n_dirs[p]; d++) {
            fprintf(b, "%s", d ? ", " : "");
            msg_path(b, c, c->dirs[p][d]);
            if (!is_dir(c->dirs[p][d])) fprintf(b, " (absent)");
        }
    }
}

static char *not_found_msg(const catalog *c, const char *value) {
    char *s = NULL;
    size_t n;
    FILE *b = open_memstream(&s, &n);
    if (!b) return NULL;
    fprintf(b, "model '%s' not found (quill list shows the names there are); looked in ", value);
    msg_places(b, c);
    return msg_close(b, &s);
}

// A first line, then each candidate: a name that picks exactly it, and its path.
static char *ambiguous_msg(const catalog *c, const char *value, int p, const int *idx, int k, int shown) {
    char *s = NULL;
    size_t len;
    FILE *b = open_memstream(&s, &len);
    if (!b) return NULL;
    fprintf(b, "model '%s' is ambiguous: %d files in %s match it; give one of these names (or a path):", value, k,
            place_label[p]);
    int w = 0;
    for (int i = 0; i < shown; i++) {
        const char *name = model_name(c, &c->m[idx[i]]);
        int n = name == c->m[idx[i]].path ? 0 : (int)strlen(name);
        w = n > w ? n : w;
    }
    for (int i = 0; i < shown; i++) {  // a file no name picks: its path alone
        const char *name = model_name(c, &c->m[idx[i]]), *path = c->m[idx[i]].path;
        if (name == path) fprintf(b, "\n  %s", path);
        else fprintf(b, "\n  %-*s  %s", w, name, path);
    }
    if (k > shown) fprintf(b, "\n  ... and %d more (quill list shows them all)", k - shown);
    return msg_close(b, &s);
}

// ---- resolving -m -------------------------------------------------------------

static int copy_path(char out[MP_PATH_MAX], const char *path, char **msg) {
    if (strlen(path) < MP_PATH_MAX) return strcpy(out, path), 0;
    if (asprintf(msg, "%.200s...: path longer than %d bytes", path, MP_PATH_MAX - 1) < 0) *msg = NULL;
    else sanitize(*msg, 1);
    return -1;
}

// A value meant as a path, not a name: when it names no file and no model, it
// gets the loader's "cannot open" error.
static int looks_like_path(const char *v) { return v[0] == '/' || v[0] == '.' || v[0] == '~' || has_gguf_ext(v); }

int mp_resolve(const char *value, char path[MP_PATH_MAX], char **msg) {
    *msg = NULL;
    struct stat st;
    const int exists = !stat(value, &st);
    if (exists && !S_ISDIR(st.st_mode)) return copy_path(path, value, msg);
    enum { SHOWN = 32 };  // candidates an ambiguity lists
    catalog c;
    catalog_init(&c);
    int idx[SHOWN], k = 0, p, rc = -1;
    for (p = 0; p < MP_N_PLACES; p++) {
        scan_upto(&c, p);
        if ((k = find_in_place(&c, p, value, idx, SHOWN))) break;
    }
    if (c.oom) *msg = NULL;
    else if (k == 1) rc = copy_path(path, c.m[idx[0]].path, msg);
    else if (k > 1) *msg = ambiguous_msg(&c, value, p, idx, k, k < SHOWN ? k : SHOWN);
    else if (exists || looks_like_path(value)) rc = copy_path(path, value, msg);  // a folder: "is a directory"
    else *msg = not_found_msg(&c, value);
    catalog_free(&c);
    return rc;
}

// ---- quill list -----------------------------------------------------------------

// general.file_type (llama.cpp's llama_ftype) as the name people know.
static const char *ftype_name(uint32_t t) {
    static const char *const names[] = {
        [0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [7] = "Q8_0", [8] = "Q5_0", [9] = "Q5_1",
        [10] = "Q2_K", [11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S", [15] = "Q4_K_M",
        [16] = "Q5_K_S", [17] = "Q5_K_M", [18] = "Q6_K", [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S",
        [22] = "IQ3_XS", [23] = "IQ3_XXS", [24] = "IQ1_S", [25] = "IQ4_NL", [26] = "IQ3_S", [27] = "IQ3_M",
        [28] = "IQ2_S", [29] = "IQ2_M", [30] = "IQ4_XS", [31] = "IQ1_M", [32] = "BF16", [36] = "TQ1_0",
        [37] = "TQ2_0", [38] = "MXFP4_MOE",
    };
    t &= ~1024u;  // LLAMA_FTYPE_GUESSED
    return t < sizeof names / sizeof *names ? names[t] : NULL;
}

typedef struct {
    const mp_model *m;
    const char *name;  // what -m takes for exactly this file
    char arch[64];     // general.architecture
    char type[32];     // general.file_type's name, else the type holding the most tensor bytes
    char error[ERR_LEN];  // why the file does not parse ("": it does)
} list_row;

static void read_header(list_row *r) {
    gguf_file f;
    char err[ERR_LEN];
    if (gguf_open(&f, r->m->path, err)) {
        size_t n = strlen(r->m->path);  // gguf_open's message starts with the path, which the row shows
        snprintf(r->error, sizeof r->error, "%s", !strncmp(err, r->m->path, n) && err[n] == ':' ? err + n + 2 : err);
        return;
    }
    gguf_str s;
    uint32_t ft;
    if (!gguf_get_str(&f, "general.architecture", &s, err))
        snprintf(r->arch, sizeof r->arch, "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    if (!gguf_get_u32(&f, "general.file_type", &ft, err) && ftype_name(ft)) {
        snprintf(r->type, sizeof r->type, "%s", ftype_name(ft));
    } else {
        uint64_t bytes[Q_TYPE_COUNT] = {0}, best = 0;
        char tb[16];
        for (uint64_t i = 0; i < f.n_tensors; i++)
            if (f.tensors[i].type < Q_TYPE_COUNT) bytes[f.tensors[i].type] += f.tensors[i].nbytes;
        for (uint32_t t = 0; t < Q_TYPE_COUNT; t++)
            if (bytes[t] > best) best = bytes[t], snprintf(r->type, sizeof r->type, "%s", qtype_name(t, tb));
    }
    sanitize(r->arch, 0);
    gguf_close(&f);
}

static int cmp_row(const void *pa, const void *pb) {  // name, then place, then path
    const list_row *a = pa, *b = pb;
    int d = strcasecmp(a->name, b->name);
    if (!d) d = strcmp(a->name, b->name);
    if (!d) d = a->m->place - b->m->place;
    return d ? d : strcmp(a->m->path, b->m->path);
}

static void human_size(uint64_t n, char out[16]) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)n;
    int u = 0;
    while (x >= 1024 && u < 4) x /= 1024, u++;
    if (u) snprintf(out, 16, "%.1f %s", x, unit[u]);
    else snprintf(out, 16, "%" PRIu64 " B", n);
}

// A copy fit for a terminal line or a JSON string (NULL when out of memory).
static char *clean(const char *s) {
    char *t = strdup(s);
    if (t) sanitize(t, 0);
    return t;
}

static int print_json(FILE *out, const list_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        const list_row *r = &rows[i];
        char *name = clean(r->name), *path = clean(r->m->path), *error = r->error[0] ? clean(r->error) : NULL;
        json_t *o = json_object();
        if (!o || !name || !path || (r->error[0] && !error)) return json_decref(o), free(name), free(path), free(error), -1;
        json_object_set_new(o, "name", json_string(name));
        json_object_set_new(o, "path", json_string(path));
        json_object_set_new(o, "source", json_string(place_id[r->m->place]));
        json_object_set_new(o, "size", json_integer((json_int_t)r->m->size));
        json_object_set_new(o, "architecture", r->error[0] ? json_null() : json_string(r->arch));
        json_object_set_new(o, "type", r->error[0] ? json_null() : json_string(r->type));
        if (error) json_object_set_new(o, "error", json_string(error));
        char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o), free(name), free(path), free(error);
        if (!line) return -1;
        fprintf(out, "%s\n", line);
        free(line);
    }
    return 0;
}

static int print_table(FILE *out, const list_row *rows, int n) {
    int w[5] = {4, 4, 4, 4, 6};  // NAME SIZE ARCH TYPE SOURCE: the widest of each column
    char size[16];
    for (int i = 0; i < n; i++) {
        const char *col[5] = {rows[i].name, size, rows[i].arch, rows[i].type, place_id[rows[i].m->place]};
        human_size(rows[i].m->size, size);
        for (int j = 0; j < 5; j++) w[j] = (int)strlen(col[j]) > w[j] ? (int)strlen(col[j]) : w[j];
    }
    fprintf(out, "%-*s  %*s  %-*s  %-*s  %-*s  %s\n", w[0], "NAME", w[1], "SIZE", w[2], "ARCH", w[3], "TYPE", w[4],
            "SOURCE", "PATH");
    for (int i = 0; i < n; i++) {
        const list_row *r = &rows[i];
        char *name = clean(r->name), *path = clean(r->m->path), *error = r->error[0] ? clean(r->error) : NULL;
        if (!name || !path || (r->error[0] && !error)) return free(name), free(path), free(error), -1;
        human_size(r->m->size, size);
        const char *arch = r->error[0] || !r->arch[0] ? "-" : r->arch, *type = r->error[0] || !r->type[0] ? "-" : r->type;
        fprintf(out, "%-*s  %*s  %-*s  %-*s  %-*s  %s", w[0], name, w[1], size, w[2], arch, w[3], type, w[4],
                place_id[r->m->place], path);
        fprintf(out, error ? "  (error: %s)\n" : "\n", error);
        free(name), free(path), free(error);
    }
    return 0;
}

int mp_list(FILE *out, int json, char **msg) {
    *msg = NULL;
    catalog c;
    catalog_init(&c);
    scan_upto(&c, MP_N_PLACES - 1);
    list_row *rows = c.oom ? NULL : calloc((size_t)c.n + 1, sizeof *rows);
    int n = rows ? c.n : -1;
    for (int i = 0; i < n; i++) {
        rows[i] = (list_row){.m = &c.m[i], .name = model_name(&c, &c.m[i])};
        read_header(&rows[i]);
    }
    if (n > 0) qsort(rows, (size_t)n, sizeof *rows, cmp_row);
    if (n > 0 && (json ? print_json(out, rows, n) : print_table(out, rows, n))) n = -1;
    if (n == 0) {
        char *s = NULL;
        size_t len;
        FILE *b = open_memstream(&s, &len);
        *msg = NULL;
        if (b) {
            fprintf(b, "no models found; looked in ");
            msg_places(b, &c);
            *msg = msg_close(b, &s);
        }
    }
    free(rows);
    catalog_free(&c);
    return n;
}
