//! ElectroDB models (`new Entity(schema)` or `new Service({...})`) as mappings.
//!
//! The input is JSON: an object of entity schemas keyed by their alias (what `new Service`
//! takes), or one entity schema with `model`, `attributes` and `indexes`. Keys follow
//! ElectroDB's own rules (`src/entity.js`, `_makeKeyFixings` and `_makeKey`):
//!
//! - partition keys start with `$service`, sort keys with `$entity_version` (in a collection:
//!   `$collection#entity_version`; a clustered index puts `#entity_version` after the
//!   composites; an index without a sort key carries both in its partition key; `scope` adds
//!   `_scope` to the partition key prefix);
//! - each composite is written `#label_value`, the label being the attribute's `label` or name;
//!   a key with a `template` is the template's text with `${attribute}` filled instead;
//! - the whole key is then lower-cased (`casing` may say `upper` or `none`), while the
//!   attributes keep their case: composites become `lower` (or `upper`) placeholders paired
//!   with the attribute holding the original (`copy`), so the key columns keep the real values;
//! - items carry `__edb_e__` (the entity name, our discriminator) and `__edb_v__` (its version,
//!   which the sort-key prefix already pins; dropped).

use serde_json::{Map, Value as Json};

use super::ColumnSpec;
use super::{
    Cx, EntitySpec, ImportErrorKind, ImportErrors, Spec, TemplateText, column_name, push_attribute_column, table_name,
};
use crate::mapping::template::Case;

/// The attribute naming each item's entity.
pub const ENTITY_ATTRIBUTE: &str = "__edb_e__";
/// The attribute holding the entity's model version.
pub const VERSION_ATTRIBUTE: &str = "__edb_v__";

pub(crate) fn read(mut cx: Cx<'_>, json: &Json) -> Result<Spec, ImportErrors> {
    let mut spec = Spec {
        type_attribute: Some(ENTITY_ATTRIBUTE.into()),
        notes: vec![format!(
            "ElectroDB conventions: `{ENTITY_ATTRIBUTE}` names the entity, `{VERSION_ATTRIBUTE}` its version (pinned by \
             the sort key prefix, so dropped); keys are lower-cased unless an index says `casing`, attributes keep their \
             case."
        )],
        entities: Vec::new(),
    };
    let Some(top) = cx.object(None, "(top level)", json) else { return Err(ImportErrors(cx.errors)) };
    let schemas: Vec<(String, &Json)> = if top.contains_key("model") {
        vec![(String::new(), json)]
    } else {
        top.iter().map(|(k, v)| (k.clone(), v)).collect()
    };
    if schemas.is_empty() {
        cx.err(None, None, ImportErrorKind::NoEntities, Some("pass the object given to `new Service({...})`, or one entity schema with `model`, `attributes` and `indexes`".into()));
    }
    for (alias, schema) in schemas {
        if let Some(e) = entity(&mut cx, &alias, schema) {
            spec.entities.push(e);
        }
    }
    cx.finish(spec)
}

/// What a composite needs of its attribute.
struct Attribute<'j> {
    name: String,
    /// Stored under this name (`field`, else the name).
    field: String,
    label: String,
    kind: &'j Json,
    required: bool,
    padding: Option<(usize, String)>,
}

fn entity(cx: &mut Cx<'_>, alias: &str, schema: &Json) -> Option<EntitySpec> {
    let shown = if alias.is_empty() { None } else { Some(alias) };
    let obj = cx.object(shown, "(entity schema)", schema)?;
    let Some(model) = obj.get("model") else {
        cx.missing(
            shown,
            "model",
            "the entity schema",
            Some("ElectroDB v1 schemas have `model: { entity, version, service }`".into()),
        );
        return None;
    };
    let model = cx.object(shown, "model", model)?;
    let name = cx.opt_str(shown, "model.entity", model.get("entity"));
    let version = match model.get("version") {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let service = cx.opt_str(shown, "model.service", model.get("service"));
    let (Some(name), Some(version), Some(service)) = (name, version.clone(), service) else {
        for (f, present) in [("entity", name.is_some()), ("version", version.is_some()), ("service", service.is_some())]
        {
            if !present {
                cx.missing(
                    shown,
                    &format!("model.{f}"),
                    "`model`",
                    Some("ElectroDB keys start with `$service` and `$entity_version`: all three are needed".into()),
                );
            }
        }
        return None;
    };
    let name = name.to_owned();
    let ent = Some(name.as_str());
    let base = if alias.is_empty() { 0 } else { cx.key_offset(alias, 0).unwrap_or(0) };
    let mut e = EntitySpec {
        name: name.clone(),
        table: table_name(&name),
        match_values: vec![name.clone()],
        line: Some(cx.line_at(base)),
        drop: vec![VERSION_ATTRIBUTE.into()],
        ..EntitySpec::default()
    };

    // Attributes.
    let mut attributes: Vec<Attribute<'_>> = Vec::new();
    match obj.get("attributes") {
        Some(Json::Object(attrs)) => {
            let attrs = cx.written_order(attrs.iter().collect(), base);
            for (an, def) in attrs {
                let path = format!("attributes.{an}");
                let (field, label, required, padding) = match def {
                    Json::Object(d) => {
                        let field = cx.opt_str(ent, &format!("{path}.field"), d.get("field")).unwrap_or(an).to_owned();
                        let label = cx.opt_str(ent, &format!("{path}.label"), d.get("label")).unwrap_or(an).to_owned();
                        let required = d.get("required").and_then(Json::as_bool).unwrap_or(false);
                        let padding = d.get("padding").and_then(Json::as_object).and_then(|p| {
                            let len = p.get("length")?.as_u64()? as usize;
                            Some((len, p.get("char")?.as_str()?.to_owned()))
                        });
                        for hook in ["watch", "get", "set"] {
                            if let Some(h) = d.get(hook).filter(|h| !h.is_null()) {
                                let what = match (hook, h) {
                                    ("watch", Json::Array(w)) => format!(
                                        "computed from {} (`watch`); kept as a plain column, the computation is not checked",
                                        w.iter().filter_map(Json::as_str).map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                                    ),
                                    ("watch", _) => "computed from other attributes (`watch`); kept as a plain column, the computation is not checked".into(),
                                    _ => format!("`{hook}` hook; the stored value is imported as it is"),
                                };
                                e.unsupported.push((format!("{path}.{hook}"), what));
                            }
                        }
                        (field, label, required, padding)
                    }
                    Json::String(_) | Json::Array(_) => (an.clone(), an.clone(), false, None),
                    other => {
                        cx.wrong_type(
                            ent,
                            &path,
                            "an attribute definition (an object, a type name or an enum array)",
                            other,
                        );
                        continue;
                    }
                };
                let kind = def;
                attributes.push(Attribute { name: an.clone(), field, label, kind, required, padding });
            }
        }
        Some(other) => cx.wrong_type(ent, "attributes", "an object", other),
        None => cx.missing(ent, "attributes", "the entity schema", None),
    }

    // Indexes, in the order written; the first writer of a key field wins (ElectroDB insists the
    // others define it identically).
    let indexes = match obj.get("indexes") {
        Some(Json::Object(i)) => i,
        Some(other) => {
            cx.wrong_type(ent, "indexes", "an object", other);
            return None;
        }
        None => {
            cx.missing(
                ent,
                "indexes",
                "the entity schema",
                Some("ElectroDB entities need at least a primary index".into()),
            );
            return None;
        }
    };
    // The table's own index (no `index` name) first, then the others as written.
    let mut indexes = cx.written_order(indexes.iter().collect(), base);
    indexes.sort_by_key(|(_, i)| i.get("index").is_some_and(|n| !n.is_null()));
    for (pattern, index) in indexes {
        let path = format!("indexes.{pattern}");
        let Some(index) = cx.object(ent, &path, index) else { continue };
        let collection: Vec<String> = match index.get("collection") {
            Some(Json::String(s)) => vec![s.clone()],
            Some(Json::Array(a)) => a.iter().filter_map(Json::as_str).map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let clustered = index.get("type").and_then(Json::as_str) == Some("clustered");
        let scope = index.get("scope").and_then(Json::as_str).unwrap_or_default();
        let pk = index.get("pk").and_then(Json::as_object);
        let sk = index.get("sk").and_then(Json::as_object);
        let Some(pk) = pk else {
            cx.missing(ent, &format!("{path}.pk"), &format!("index `{pattern}`"), None);
            continue;
        };
        // `_makeKeyFixings`
        let collection_prefix = collection
            .iter()
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("${c}") } else { format!("#{c}") })
            .collect::<String>();
        let mut entity_keys = if collection_prefix.is_empty() { format!("${name}") } else { format!("#{name}") };
        entity_keys.push_str(&format!("_{version}"));
        let (mut sk_prefix, postfix) = if clustered {
            (collection_prefix.clone(), entity_keys)
        } else {
            (format!("{collection_prefix}{entity_keys}"), String::new())
        };
        let mut pk_prefix = format!("${service}");
        if sk.is_none() {
            pk_prefix.push_str(&sk_prefix);
            pk_prefix.push_str(&postfix);
            sk_prefix.clear();
        }
        if !scope.is_empty() {
            pk_prefix.push_str(&format!("_{scope}"));
        }
        let sides = [
            ("pk", Some(pk), pk_prefix, String::new()),
            ("sk", sk, sk_prefix, if sk.is_some() { postfix } else { String::new() }),
        ];
        for (side, def, prefix, postfix) in sides {
            let Some(def) = def else { continue };
            let kpath = format!("{path}.{side}");
            let Some(field) = cx.opt_str(ent, &format!("{kpath}.field"), def.get("field")) else {
                cx.missing(
                    ent,
                    &format!("{kpath}.field"),
                    &format!("`{kpath}`"),
                    Some("name the table attribute the key is stored in".into()),
                );
                continue;
            };
            if e.keys.iter().any(|(a, _)| a == field) {
                continue;
            }
            if let Some(t) = key_template(cx, &mut e, &attributes, def, &kpath, field, &prefix, &postfix) {
                e.keys.push((field.to_owned(), t));
            }
        }
    }

    // Columns: the key placeholders (paired with their attributes), then the other attributes.
    let required = |field: &str| attributes.iter().any(|a| a.field == field && a.required);
    e.columns = e.placeholders.columns(&required);
    for a in &attributes {
        let Some(ty) = column_type(a.kind) else {
            e.unsupported.push((format!("attributes.{}.type", a.name), "unknown type; kept as `json`".into()));
            let column = ColumnSpec { name: column_name(&a.name), ty: Some("json".into()), ..ColumnSpec::default() };
            push_attribute_column(&mut e, column, &a.field);
            continue;
        };
        let column =
            ColumnSpec { name: column_name(&a.name), ty: Some(ty), required: a.required, ..ColumnSpec::default() };
        push_attribute_column(&mut e, column, &a.field);
    }
    Some(e)
}

/// The template of one key, following `_makeKey`: prefix, then `#label_value` per composite (or
/// the custom template's text), then the postfix, all in the key's casing.
#[allow(clippy::too_many_arguments)]
fn key_template(
    cx: &mut Cx<'_>,
    e: &mut EntitySpec,
    attributes: &[Attribute<'_>],
    def: &Map<String, Json>,
    path: &str,
    field: &str,
    prefix: &str,
    postfix: &str,
) -> Option<String> {
    let ent = Some(e.name.clone());
    let ent = ent.as_deref();
    let case = match def.get("casing").and_then(Json::as_str) {
        None | Some("default" | "lower") => Some(Case::Lower),
        Some("upper") => Some(Case::Upper),
        Some("none") => None,
        Some(other) => {
            cx.err(
                ent,
                Some(format!("{path}.casing")),
                ImportErrorKind::Unsupported { what: format!("casing `{other}`") },
                Some("ElectroDB casings are `default`, `lower`, `upper` and `none`".into()),
            );
            return None;
        }
    };
    let fold = |s: &str| case.map_or_else(|| s.to_owned(), |c| c.fold(s));
    // (attribute, literal before it); a trailing literal has no attribute.
    let (custom, labels): (bool, Vec<(Option<String>, String)>) = match def.get("template") {
        Some(Json::String(t)) => (true, parse_template(t)),
        _ => match def.get("composite") {
            Some(Json::Array(c)) => {
                let mut out = Vec::new();
                for (i, n) in c.iter().enumerate() {
                    match n.as_str() {
                        Some(n) => {
                            let label = attributes.iter().find(|a| a.name == n).map_or(n, |a| a.label.as_str());
                            out.push((Some(n.to_owned()), format!("#{label}_")));
                        }
                        None => cx.wrong_type(ent, &format!("{path}.composite[{i}]"), "an attribute name", n),
                    }
                }
                (false, out)
            }
            None => (false, Vec::new()),
            Some(other) => {
                cx.wrong_type(ent, &format!("{path}.composite"), "an array of attribute names", other);
                return None;
            }
        },
    };
    let mut t = TemplateText::default();
    t.literal(&fold(if custom { "" } else { prefix }));
    for (i, (attr, label)) in labels.iter().enumerate() {
        t.literal(&fold(label));
        let Some(attr) = attr else { continue };
        let Some(a) = attributes.iter().find(|a| &a.name == attr) else {
            let field = if custom { format!("{path}.template") } else { format!("{path}.composite[{i}]") };
            cx.err(
                ent,
                Some(field),
                ImportErrorKind::UnknownAttribute { name: attr.clone() },
                Some("declare it in `attributes`, or fix the name".into()),
            );
            return None;
        };
        let (ty, name_suffix, copy) = placeholder_for(e, a, path, case);
        let base = format!("{}{name_suffix}", a.name);
        let name = e.placeholders.claim(&base, &ty, field, copy.then_some(a.field.as_str()));
        t.placeholder(&name, &ty);
    }
    if !custom {
        t.literal(&fold(postfix));
    }
    if t.0.is_empty() {
        cx.err(
            ent,
            Some(path.to_owned()),
            ImportErrorKind::Unsupported { what: "empty key".into() },
            Some("give the key `composite` attributes or a `template`".into()),
        );
        return None;
    }
    Some(t.0)
}

/// The placeholder type of a composite, a name suffix, and whether the attribute is a copy of
/// the key's value.
fn placeholder_for(
    e: &mut EntitySpec,
    a: &Attribute<'_>,
    path: &str,
    case: Option<Case>,
) -> (String, &'static str, bool) {
    let text = match case {
        Some(Case::Lower) => "lower",
        Some(Case::Upper) => "upper",
        None => "string",
    };
    let kind = match a.kind {
        Json::Object(d) => d.get("type").and_then(Json::as_str),
        other => other.as_str(),
    };
    // ElectroDB pads strings only (`_makePadding`): numbers are written as JavaScript prints them.
    match (kind, &a.padding) {
        (Some("number"), _) => ("decimal".into(), "", true),
        (Some("boolean"), _) => {
            e.unsupported.push((
                format!("attributes.{}", a.name),
                format!(
                    "boolean composite in `{path}`: the key's text is its own column `{}_key`",
                    column_name(&a.name)
                ),
            ));
            (text.into(), "_key", false)
        }
        (_, Some((len, c))) => {
            e.unsupported.push((
                format!("attributes.{}.padding", a.name),
                format!(
                    "padding to {len} with `{c}` in `{path}`: the padded text is its own column `{}_key`",
                    column_name(&a.name)
                ),
            ));
            (text.into(), "_key", false)
        }
        _ => (text.into(), "", true),
    }
}

/// ElectroDB's `_parseTemplateKey`: `USER#${userId}#${name}` into (attribute, label before it);
/// text after the last attribute comes last, without one.
fn parse_template(t: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find("${") {
        let Some(close) = rest[open..].find('}') else { break };
        out.push((Some(rest[open + 2..open + close].trim().to_owned()), rest[..open].to_owned()));
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        out.push((None, rest.to_owned()));
    }
    out
}

/// Our column type for an ElectroDB attribute type; `None` when unknown.
fn column_type(kind: &Json) -> Option<String> {
    match kind {
        Json::Array(_) => Some("string".into()), // an enum of strings
        Json::String(s) => match s.as_str() {
            "string" => Some("string".into()),
            "number" => Some("decimal".into()),
            "boolean" => Some("bool".into()),
            "any" | "custom" | "list" | "map" => Some("json".into()),
            "set" => Some("json".into()),
            _ => None,
        },
        Json::Object(d) => {
            let ty = d.get("type")?;
            match ty.as_str() {
                Some("list") => Some(match d.get("items") {
                    Some(items) => format!("list<{}>", column_type(items)?),
                    None => "json".into(),
                }),
                Some("set") => Some(match d.get("items").and_then(Json::as_str) {
                    Some("string") => "set<string>".into(),
                    Some("number") => "set<decimal>".into(),
                    _ => "json".into(),
                }),
                Some("map") => match d.get("properties").and_then(Json::as_object) {
                    Some(props) if !props.is_empty() => {
                        let mut fields = Vec::new();
                        for (n, p) in props {
                            let stored = p.get("field").and_then(Json::as_str).unwrap_or(n);
                            fields.push(format!("{}: {}", struct_field(stored), column_type(p)?));
                        }
                        Some(format!("struct<{}>", fields.join(", ")))
                    }
                    _ => Some("json".into()),
                },
                _ => column_type(ty),
            }
        }
        Json::Null => Some("string".into()),
        _ => None,
    }
}

fn struct_field(name: &str) -> String {
    if !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-') {
        name.to_owned()
    } else {
        format!("`{name}`")
    }
}
