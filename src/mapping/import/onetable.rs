//! OneTable schemas (`format`, `version`, `indexes`, `models`, `params`) as mappings.
//!
//! Keys follow OneTable's own rules (`src/Model.js`, `runTemplate` and `transformWriteDate`):
//! a key field's `value` template is filled by `${name}` with the named field's value, or with
//! `${name:len:pad}` left-padded to `len` characters with `pad` (default `0`); dates are written
//! with JavaScript's `toISOString()` (always three millisecond digits) when `isoDates` is set,
//! else as epoch milliseconds. Items carry the model name in `params.typeField` (default
//! `_type`). A field's `map` stores it under another attribute name (a rename), or packed into a
//! map attribute (`map: "data.email"`), which a mapping cannot unpack.

use serde_json::{Map, Value as Json};

use super::{
    ColumnSpec, Cx, EntitySpec, ImportErrorKind, ImportErrors, Spec, TemplateText, column_name, push_attribute_column,
    table_name,
};

/// OneTable's default type field.
pub const TYPE_FIELD: &str = "_type";

pub(crate) fn read(mut cx: Cx<'_>, json: &Json) -> Result<Spec, ImportErrors> {
    let Some(top) = cx.object(None, "(top level)", json) else { return Err(ImportErrors(cx.errors)) };
    let params = top.get("params").and_then(Json::as_object).cloned().unwrap_or_default();
    let type_field = cx.opt_str(None, "params.typeField", params.get("typeField")).unwrap_or(TYPE_FIELD).to_owned();
    let iso_dates = params.get("isoDates").and_then(Json::as_bool).unwrap_or(false);
    let timestamps = params.get("timestamps").and_then(Json::as_bool).unwrap_or(false);
    let created = cx.opt_str(None, "params.createdField", params.get("createdField")).unwrap_or("created").to_owned();
    let updated = cx.opt_str(None, "params.updatedField", params.get("updatedField")).unwrap_or("updated").to_owned();

    // Key attributes of every index.
    let mut key_attributes: Vec<String> = Vec::new();
    match top.get("indexes") {
        Some(Json::Object(indexes)) => {
            if !indexes.contains_key("primary") {
                cx.missing(
                    None,
                    "indexes.primary",
                    "`indexes`",
                    Some("OneTable schemas name their table key in `indexes.primary.hash`".into()),
                );
            }
            let mut indexes: Vec<(&String, &Json)> = indexes.iter().collect();
            indexes.sort_by_key(|(n, _)| *n != "primary");
            for (name, idx) in indexes {
                let Some(idx) = cx.object(None, &format!("indexes.{name}"), idx) else { continue };
                for side in ["hash", "sort"] {
                    if let Some(a) = cx.opt_str(None, &format!("indexes.{name}.{side}"), idx.get(side))
                        && !key_attributes.iter().any(|k| k == a)
                    {
                        key_attributes.push(a.to_owned());
                    }
                }
            }
        }
        Some(other) => cx.wrong_type(None, "indexes", "an object", other),
        None => cx.missing(
            None,
            "indexes",
            "the schema",
            Some("a OneTable schema has `indexes`, `models` and `params`".into()),
        ),
    }

    let mut spec = Spec {
        type_attribute: Some(type_field.clone()),
        notes: vec![format!(
            "OneTable conventions: `{type_field}` names the model; dates are {} in the data.",
            if iso_dates { "ISO 8601 strings (`toISOString()`)" } else { "epoch milliseconds" }
        )],
        entities: Vec::new(),
    };
    let models = match top.get("models") {
        Some(Json::Object(m)) => m,
        Some(other) => {
            cx.wrong_type(None, "models", "an object", other);
            return Err(ImportErrors(cx.errors));
        }
        None => {
            cx.missing(
                None,
                "models",
                "the schema",
                Some("a OneTable schema has `indexes`, `models` and `params`".into()),
            );
            return Err(ImportErrors(cx.errors));
        }
    };
    if models.is_empty() {
        cx.err(None, Some("models".into()), ImportErrorKind::NoEntities, Some("add a model to `models`".into()));
    }
    let settings = Settings { iso_dates, timestamps, created, updated, type_field };
    let models_at = cx.key_offset("models", 0).unwrap_or(0);
    for (name, model) in cx.written_order(models.iter().collect(), models_at) {
        if let Some(e) = entity(&mut cx, name, model, &key_attributes, &settings) {
            spec.entities.push(e);
        }
    }
    cx.finish(spec)
}

struct Settings {
    iso_dates: bool,
    timestamps: bool,
    created: String,
    updated: String,
    type_field: String,
}

/// A model field as stored.
struct Field<'j> {
    name: String,
    def: &'j Map<String, Json>,
    ty: String,
    /// The attribute it is stored in, when not packed.
    stored: Option<String>,
    iso_dates: bool,
}

fn entity(cx: &mut Cx<'_>, name: &str, model: &Json, key_attributes: &[String], s: &Settings) -> Option<EntitySpec> {
    let ent = Some(name);
    let fields = cx.object(ent, "(model)", model)?;
    let mut e = EntitySpec {
        name: name.to_owned(),
        table: table_name(name),
        match_values: vec![name.to_owned()],
        line: cx.line_of_key(name),
        ..EntitySpec::default()
    };
    let base = cx.key_offset(name, cx.key_offset("models", 0).unwrap_or(0)).unwrap_or(0);
    let empty = Map::new();
    let mut list: Vec<Field<'_>> = Vec::new();
    let mut packed_into: Vec<String> = Vec::new();
    for (fname, def) in cx.written_order(fields.iter().collect(), base) {
        let def = match def {
            Json::Object(d) => d,
            // `{ name: String }` shorthand dumped as a type name.
            Json::String(_) => &empty,
            other => {
                cx.wrong_type(ent, fname, "a field definition", other);
                continue;
            }
        };
        let ty = match def.get("type").or_else(|| fields.get(fname).filter(|v| v.is_string())) {
            Some(Json::String(t)) => t.to_ascii_lowercase(),
            None => "string".into(),
            Some(other) => {
                cx.wrong_type(ent, &format!("{fname}.type"), "a type name", other);
                continue;
            }
        };
        let stored = match cx.opt_str(ent, &format!("{fname}.map"), def.get("map")) {
            Some(m) if m.contains('.') => {
                let (target, sub) = m.split_once('.').unwrap_or((m, ""));
                e.unsupported.push((
                    format!("{fname}.map"),
                    format!("packed into map attribute `{target}` as `{sub}`; the whole `{target}` is a `json` column"),
                ));
                if !packed_into.iter().any(|p| p == target) {
                    packed_into.push(target.to_owned());
                }
                None
            }
            Some(m) => Some(m.to_owned()),
            None => Some(fname.clone()),
        };
        let iso_dates = def.get("isoDates").and_then(Json::as_bool).unwrap_or(s.iso_dates);
        for (flag, what) in [
            ("crypt", "encrypted with the table's crypto key; imported as the stored ciphertext"),
            (
                "unique",
                "unique values are enforced with extra `_unique#...` items, which carry no type field and go to `_untyped`",
            ),
        ] {
            if def.get(flag).is_some_and(|v| v.as_bool() != Some(false) && !v.is_null()) {
                e.unsupported.push((format!("{fname}.{flag}"), what.into()));
            }
        }
        list.push(Field { name: fname.clone(), def, ty, stored, iso_dates });
    }
    if s.timestamps {
        for ts in [&s.created, &s.updated] {
            if !list.iter().any(|f| &f.name == ts) {
                e.columns.push(ColumnSpec {
                    name: column_name(ts),
                    ty: Some("timestamp".into()),
                    format: Some(if s.iso_dates { "iso8601" } else { "epoch_ms" }.into()),
                    ..ColumnSpec::default()
                });
                if column_name(ts) != *ts
                    && let Some(c) = e.columns.last_mut()
                {
                    c.source = Some(ts.clone());
                }
            }
        }
    }

    // Keys, in index order (the table's own first).
    let rank = |f: &Field<'_>| f.stored.as_ref().and_then(|s| key_attributes.iter().position(|k| k == s));
    let mut keyed: Vec<&Field<'_>> = list.iter().filter(|f| rank(f).is_some()).collect();
    keyed.sort_by_key(|f| rank(f));
    for f in keyed {
        let Some(stored) = &f.stored else { continue };
        if !key_attributes.contains(stored) || stored == &s.type_field {
            continue;
        }
        let Some(value) = f.def.get("value") else {
            // A key field without a template holds its value as it is.
            let (ty, _) = placeholder_type(f);
            let ph = e.placeholders.claim(&f.name, &ty, stored, None);
            let mut t = TemplateText::default();
            t.placeholder(&ph, &ty);
            e.keys.push((stored.clone(), t.0));
            continue;
        };
        let Some(value) = value.as_str() else {
            cx.wrong_type(ent, &format!("{}.value", f.name), "a template string", value);
            continue;
        };
        if let Some(t) = key_template(cx, &mut e, &list, &f.name, stored, value) {
            e.keys.push((stored.clone(), t));
        }
    }
    let mut key_columns =
        e.placeholders.columns(&|a| list.iter().any(|f| f.stored.as_deref() == Some(a) && required(f)));
    key_columns.append(&mut e.columns);
    e.columns = key_columns;

    // The other fields.
    for f in &list {
        let Some(stored) = &f.stored else { continue };
        if key_attributes.contains(stored) || stored == &s.type_field {
            continue;
        }
        if let Some(v) = f.def.get("value").and_then(Json::as_str) {
            e.unsupported.push((
                format!("{}.value", f.name),
                format!("computed from the template `{v}`; kept as a plain column"),
            ));
        }
        let (ty, format) = column_type(f);
        let c = ColumnSpec {
            name: column_name(&f.name),
            ty: Some(ty),
            format,
            required: required(f),
            ..ColumnSpec::default()
        };
        push_attribute_column(&mut e, c, stored);
    }
    for target in packed_into {
        let c = ColumnSpec { name: column_name(&target), ty: Some("json".into()), ..ColumnSpec::default() };
        push_attribute_column(&mut e, c, &target);
    }
    Some(e)
}

fn required(f: &Field<'_>) -> bool {
    f.def.get("required").and_then(Json::as_bool).unwrap_or(false)
}

/// A key's `value` template in our syntax: literals escaped, `${name}` and `${name:len:pad}` as
/// typed placeholders paired with the fields they copy.
fn key_template(
    cx: &mut Cx<'_>,
    e: &mut EntitySpec,
    fields: &[Field<'_>],
    field: &str,
    key: &str,
    value: &str,
) -> Option<String> {
    let mut t = TemplateText::default();
    let mut rest = value;
    while let Some(open) = rest.find("${") {
        let Some(close) = rest[open..].find('}') else { break };
        t.literal(&rest[..open]);
        let inner = &rest[open + 2..open + close];
        let mut parts = inner.split(':');
        let name = parts.next().unwrap_or_default();
        let len = parts.next();
        let pad = parts.next().unwrap_or("0");
        let Some(f) = fields.iter().find(|f| f.name == name) else {
            cx.err(
                Some(&e.name),
                Some(format!("{field}.value")),
                ImportErrorKind::UnknownField { name: name.to_owned() },
                Some(format!("`${{{name}}}` in `{value}` must name a field of the model")),
            );
            return None;
        };
        let (ty, copy) = match len.map(str::parse::<usize>) {
            None => placeholder_type(f),
            Some(Ok(n)) if f.ty == "number" && pad == "0" && (1..=19).contains(&n) => (format!("int({n})"), true),
            Some(Ok(n)) => {
                e.unsupported.push((
                    format!("{field}.value"),
                    format!("`${{{inner}}}` pads `{name}` to {n} characters with `{pad}`: the padded text is its own column `{}_key`", column_name(name)),
                ));
                ("string".into(), false)
            }
            Some(Err(_)) => {
                cx.err(
                    Some(&e.name),
                    Some(format!("{field}.value")),
                    ImportErrorKind::Unsupported { what: format!("template part `${{{inner}}}`") },
                    Some("OneTable templates are `${name}` or `${name:length:pad}`".into()),
                );
                return None;
            }
        };
        let copy = if copy { f.stored.as_deref() } else { None };
        let base = if copy.is_some() || f.stored.is_none() { f.name.clone() } else { format!("{}_key", f.name) };
        let ph = e.placeholders.claim(&base, &ty, key, copy);
        t.placeholder(&ph, &ty);
        rest = &rest[open + close + 1..];
    }
    t.literal(rest);
    if t.0.is_empty() {
        cx.err(
            Some(&e.name),
            Some(format!("{field}.value")),
            ImportErrorKind::Unsupported { what: "empty key template".into() },
            None,
        );
        return None;
    }
    Some(t.0)
}

/// The placeholder type for a field's value in a key, and whether its attribute holds the same
/// value (a copy the key column can be checked against).
fn placeholder_type(f: &Field<'_>) -> (String, bool) {
    match f.ty.as_str() {
        "date" if f.iso_dates => ("iso8601_ms".into(), true),
        "date" => ("epoch_ms".into(), true),
        "number" => ("decimal".into(), true),
        "boolean" => ("string".into(), false),
        _ => ("string".into(), true),
    }
}

fn column_type(f: &Field<'_>) -> (String, Option<String>) {
    let ty = match f.ty.as_str() {
        "string" => "string",
        "number" => "decimal",
        "boolean" => "bool",
        "binary" | "buffer" | "arraybuffer" => "binary",
        "date" => return ("timestamp".into(), Some(if f.iso_dates { "iso8601" } else { "epoch_ms" }.into())),
        _ => "json",
    };
    (ty.into(), None)
}
