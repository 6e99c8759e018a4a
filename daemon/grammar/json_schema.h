#pragma once
// JSON Schema -> grammar: the subset of JSON Schema (draft 2020-12 and draft-07 spellings) that
// people use for structured output, compiled to GBNF (then CompiledGrammar::FromGbnf). Every output
// the grammar allows validates against the schema; where the schema allows more than the grammar
// generates, the grammar takes a documented subset (marked "subset" below).
//
// Supported keywords:
//   type (one or a list), enum, const (type filters their values);
//   object: properties (kept in their order; required ones must appear, optional ones may),
//     required, additionalProperties false / true / a schema. ABSENT additionalProperties means
//     false when `properties` is given (llama.cpp's choice, subset) and any members otherwise;
//     extra member names are generated without escape sequences and never equal a named property
//     (subset);
//   array: items (schema or boolean), prefixItems, minItems, maxItems (a prefix is generated
//     whole, as long as maxItems allows: subset);
//   string: minLength, maxLength (in characters), pattern (schema_regex.h's subset), format
//     date, time, date-time (RFC 3339; day 29 of February and leap seconds are not generated:
//     subset) and uuid; any other format is refused;
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers; within +-10^15);
//   anyOf, oneOf (as anyOf: a value matching several branches of a oneOf does NOT validate, so
//     give oneOf disjoint branches), allOf of object schemas (merged: properties of the parts,
//     required of all; a property in two parts must have the same schema; no part may set
//     additionalProperties);
//   $ref to "#", "#/$defs/...", "#/definitions/..." or any local JSON pointer; recursion becomes
//     grammar recursion (nesting at run time is bounded by MatcherLimits::max_stack_depth);
//   annotations, ignored: title, description, default, examples, $schema, $id, $comment,
//     $anchor, deprecated, readOnly, writeOnly, contentEncoding, contentMediaType, $defs,
//     definitions; keywords this list does not know are ignored as annotations too.
// Refused (INVALID_ARGUMENT "json schema: unsupported keyword 'not' at /properties/a/not"):
//   not, if/then/else, dependentRequired, dependentSchemas, dependencies, patternProperties,
//   propertyNames, unevaluatedProperties, unevaluatedItems, additionalItems, contains,
//   minContains, maxContains, minProperties, maxProperties, multipleOf, uniqueItems: true,
//   minimum & co. on "number", $dynamicRef, $recursiveRef; remote $refs; $ref or anyOf/oneOf next
//   to other validating keywords; pattern together with minLength/maxLength or format.
// Whitespace: json_grammar.h (llama.cpp's convention). Numbers: JsonPrimitiveRules().
// Limits: the schema text (1 MiB), its nesting (64 levels of JSON), counts (minItems, maxLength,
// ... at most GrammarLimits::max_repetition), and the grammar's own GrammarLimits, checked while
// the grammar is written. Work: linear in the schema and the grammar it writes (schema_compiler.h
// has what is counted), under the json schema compile work budget of GrammarLimits (rule_set.h);
// the GBNF is then compiled under the grammar compile work budget for its own size. Past either,
// RESOURCE_EXHAUSTED naming the budget: "json schema compile work budget exhausted: more than
// 2048576 work units (256 x 4096 input bytes + 1000000)".

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/grammar/compiled_grammar.h"
#include "daemon/grammar/rule_set.h"

namespace niels::daemon::grammar {

// The GBNF text for a schema (root ::= the schema's value). `work`, when given, receives the
// schema stage's units and budget (also when it fails).
common::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, const GrammarLimits& limits = {},
                                               CompileWork* work = nullptr);

// JsonSchemaToGbnf + CompiledGrammar::FromGbnf. A grammar the schema cannot be satisfied by
// (e.g. a required property that recurses forever) is INVALID_ARGUMENT too; a work budget stays
// RESOURCE_EXHAUSTED. `work` receives both stages' units and budgets.
common::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileJsonSchema(std::string_view schema_json,
                                                                           const GrammarLimits& limits = {},
                                                                           CompileWork* work = nullptr);

}  // namespace niels::daemon::grammar
