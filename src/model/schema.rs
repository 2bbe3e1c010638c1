//! Tool parameter schemas as each backend accepts them. Declarations carry full JSON Schema (an MCP
//! server's `inputSchema`, an HTTP tool's `parameters`); the backends take less:
//!
//! - both: local `$ref`s (`#/$defs/…`, `#/definitions/…`, any `#/` pointer) are inlined, and
//!   `$defs`, `definitions`, `$schema`, `$id`, `$anchor` and `$comment` dropped. A reference
//!   cycle, a reference that resolves to nothing, or one past [`MAX_REF_DEPTH`] levels or
//!   [`MAX_NODES`] nodes becomes `{}` (any value). A top level that is not `type: object`
//!   becomes `{"type": "object", "properties": {}}`.
//! - Gemini (`parametersJsonSchema`): only the keywords it documents are kept — `type`, `format`,
//!   `title`, `description`, `enum`, `items`, `prefixItems`, `minItems`, `maxItems`, `minimum`,
//!   `maximum`, `anyOf`, `oneOf`, `properties`, `additionalProperties`, `required`,
//!   `propertyOrdering`, `nullable`; `const` becomes a one-value `enum`. Everything else
//!   (`pattern`, `minLength`, `default`, `examples`, `allOf`, `not`, `if`/`then`/`else`, …) is
//!   dropped.
//! - OpenAI Realtime (`parameters`): everything else is kept.
//! - sim: the declaration as it is (it reads only names and `enum`s).

use serde_json::{Map, Value};

/// How many references may nest inside one another before the rest becomes `{}`.
pub const MAX_REF_DEPTH: usize = 16;
/// How many schema nodes inlining may produce before the rest becomes `{}`.
pub const MAX_NODES: usize = 10_000;

/// Keywords Gemini's `parametersJsonSchema` documents (after references are inlined).
const GEMINI_KEYWORDS: [&str; 18] = [
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
    "nullable",
];

/// Keywords whose values are maps of names to schemas (not schemas themselves).
const SCHEMA_MAPS: [&str; 3] = ["properties", "patternProperties", "dependentSchemas"];

/// Keywords dropped for every backend once references are inlined.
const DROPPED: [&str; 6] = [
    "$defs",
    "definitions",
    "$schema",
    "$id",
    "$anchor",
    "$comment",
];

/// Which backend a schema is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Gemini Live's `parametersJsonSchema`.
    Gemini,
    /// OpenAI Realtime's function `parameters`.
    OpenAi,
}

/// The parameter schema `schema` (absent: no parameters) as `backend` accepts it.
pub fn for_backend(schema: Option<&Value>, backend: Backend) -> Value {
    let Some(schema) = schema.filter(|s| s.get("type").and_then(Value::as_str) == Some("object"))
    else {
        return serde_json::json!({ "type": "object", "properties": {} });
    };
    let mut inliner = Inliner {
        root: schema,
        nodes: 0,
        backend,
    };
    inliner.schema(schema, 0, &mut Vec::new())
}

struct Inliner<'a> {
    root: &'a Value,
    nodes: usize,
    backend: Backend,
}

impl Inliner<'_> {
    /// One schema node, its references inlined; `seen` holds the references being expanded.
    fn schema(&mut self, node: &Value, depth: usize, seen: &mut Vec<String>) -> Value {
        self.nodes += 1;
        let Value::Object(map) = node else {
            // `true`/`false` schemas and anything malformed: kept as they are.
            return node.clone();
        };
        if self.nodes > MAX_NODES {
            return Value::Object(Map::new());
        }
        if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
            return self.reference(reference, depth, seen);
        }
        let mut out = Map::new();
        for (key, value) in map {
            if DROPPED.contains(&key.as_str()) {
                continue;
            }
            let key = match (self.backend, key.as_str()) {
                (Backend::Gemini, "const") => {
                    out.insert("enum".into(), Value::Array(vec![value.clone()]));
                    continue;
                }
                (Backend::Gemini, k) if !GEMINI_KEYWORDS.contains(&k) => continue,
                _ => key,
            };
            let value = if SCHEMA_MAPS.contains(&key.as_str()) {
                match value {
                    Value::Object(named) => Value::Object(
                        named
                            .iter()
                            .map(|(name, s)| (name.clone(), self.schema(s, depth, seen)))
                            .collect(),
                    ),
                    other => other.clone(),
                }
            } else if is_schema_valued(key) {
                match value {
                    Value::Array(list) => {
                        Value::Array(list.iter().map(|s| self.schema(s, depth, seen)).collect())
                    }
                    other => self.schema(other, depth, seen),
                }
            } else {
                value.clone()
            };
            out.insert(key.clone(), value);
        }
        Value::Object(out)
    }

    fn reference(&mut self, reference: &str, depth: usize, seen: &mut Vec<String>) -> Value {
        let target = reference
            .strip_prefix('#')
            .filter(|_| depth < MAX_REF_DEPTH && !seen.iter().any(|s| s == reference))
            .and_then(|pointer| self.root.pointer(pointer));
        let Some(target) = target else {
            return Value::Object(Map::new());
        };
        seen.push(reference.to_owned());
        let inlined = self.schema(target, depth + 1, seen);
        seen.pop();
        inlined
    }
}

/// Keywords whose value is a schema or a list of schemas.
fn is_schema_valued(key: &str) -> bool {
    matches!(
        key,
        "items"
            | "prefixItems"
            | "additionalProperties"
            | "anyOf"
            | "oneOf"
            | "allOf"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "additionalItems"
            | "unevaluatedItems"
            | "unevaluatedProperties"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pydantic_like() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "Address": {
                    "type": "object",
                    "properties": {
                        "city": { "type": "string", "minLength": 1, "pattern": "^[A-Z]" },
                        "next": { "$ref": "#/$defs/Address" }
                    }
                }
            },
            "properties": {
                "home": { "$ref": "#/$defs/Address" },
                "kind": { "const": "house", "default": "house" },
                "tags": { "type": "array", "items": { "$ref": "#/definitions/missing" } }
            },
            "required": ["home"]
        })
    }

    #[test]
    fn references_are_inlined_and_cycles_cut_for_every_backend() {
        for backend in [Backend::Gemini, Backend::OpenAi] {
            let out = for_backend(Some(&pydantic_like()), backend);
            let text = out.to_string();
            assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
            assert!(!text.contains("$schema"), "{text}");
            assert_eq!(out["properties"]["home"]["type"], "object");
            assert_eq!(
                out["properties"]["home"]["properties"]["city"]["type"],
                "string"
            );
            // The recursive reference is expanded once, then cut.
            assert_eq!(
                out["properties"]["home"]["properties"]["next"],
                json!({}),
                "{backend:?}"
            );
            assert_eq!(out["properties"]["tags"]["items"], json!({}));
            assert_eq!(out["required"], json!(["home"]));
        }
    }

    #[test]
    fn gemini_keeps_only_its_keywords_and_openai_keeps_the_rest() {
        let gemini = for_backend(Some(&pydantic_like()), Backend::Gemini);
        let city = &gemini["properties"]["home"]["properties"]["city"];
        assert_eq!(city, &json!({ "type": "string" }));
        assert_eq!(
            gemini["properties"]["kind"],
            json!({ "enum": ["house"] }),
            "const becomes a one-value enum, default is dropped"
        );
        let openai = for_backend(Some(&pydantic_like()), Backend::OpenAi);
        let city = &openai["properties"]["home"]["properties"]["city"];
        assert_eq!(city["pattern"], "^[A-Z]");
        assert_eq!(city["minLength"], 1);
        assert_eq!(openai["properties"]["kind"]["const"], "house");
    }

    #[test]
    fn a_missing_or_non_object_schema_is_an_empty_object() {
        let empty = json!({ "type": "object", "properties": {} });
        assert_eq!(for_backend(None, Backend::Gemini), empty);
        assert_eq!(
            for_backend(Some(&json!({"type": "string"})), Backend::OpenAi),
            empty
        );
    }

    #[test]
    fn inlining_is_bounded_in_size() {
        // Each level references the next twice: 2^40 nodes if inlined naively.
        let mut defs = Map::new();
        for level in 0..40 {
            defs.insert(
                format!("L{level}"),
                json!({ "type": "object", "properties": {
                    "a": { "$ref": format!("#/$defs/L{}", level + 1) },
                    "b": { "$ref": format!("#/$defs/L{}", level + 1) },
                }}),
            );
        }
        let schema = json!({ "type": "object", "$defs": defs,
            "properties": { "x": { "$ref": "#/$defs/L0" } } });
        let out = for_backend(Some(&schema), Backend::OpenAi);
        let size = out.to_string().len();
        assert!(size < 2_000_000, "{size}");
    }
}
