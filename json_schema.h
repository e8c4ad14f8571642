// json_schema.h — a JSON Schema compiled to a GBNF grammar (grammar.h), so
// that constrained decoding produces JSON that validates.
//
// Supported: type (one or a list), properties / required /
// additionalProperties (default when properties are listed: none beyond
// them, as llama.cpp does; otherwise any), enum, const, items, minItems,
// maxItems, minLength, maxLength, pattern (a regex subset: literals, classes,
// . \d \w \s and their negations, groups, |, * + ? {m,n}; ^ and $ only at the
// ends; an unanchored side may have any text, as the regex search JSON Schema
// means), anyOf, oneOf (as anyOf: branches are expected to be disjoint),
// $ref to #, #/$defs/… and #/definitions/…, and numeric bounds (minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, both the number and the
// draft-4 boolean form). Integers with bounds get an exact digit grammar of
// the range. Bounded numbers are an approximation that never leaves the
// bounds: integers in [ceil(min), floor(max)] plus decimals whose integer
// part lies strictly inside that range (so e.g. 0.5..0.9 alone is refused as
// too narrow). Unbounded numbers have at most 16 integer and 16 fraction
// digits and a 3-digit exponent. Properties come out in the schema's order,
// required ones first. Other keywords (title, description, format, ...) are
// annotations here and are ignored.
#ifndef QUILL_JSON_SCHEMA_H
#define QUILL_JSON_SCHEMA_H

#include <stddef.h>

#include "grammar.h"

// The GBNF text for the schema given as JSON text (len bytes). *gbnf is
// malloc'd. 0, or -1 with the reason (naming the keyword) in err.
int json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, char *err);

// The grammar of --grammar FILE or --json-schema FILE|JSON (JSON when the
// text starts with '{' or is "true"; "{}" is --json: any JSON value). 0, or
// -1 with err.
int grammar_load(grammar **out, const char *gbnf_file, const char *json_schema, char *err);

#endif
