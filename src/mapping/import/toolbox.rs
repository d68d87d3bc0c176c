//! dynamodb-toolbox entities as mappings, in both shapes the library has had:
//!
//! - **v2**: the `EntityDTO` JSON (`entity.build(EntityDTO)`, `JSON.stringify`-ed): `entityName`,
//!   `schema.attributes` (each with `type`, `key`, `savedAs`, `required`, `transform`), the
//!   `table` (`partitionKey`, `sortKey`, `indexes`, `entityAttributeSavedAs`, default `_et`),
//!   `entityAttribute` and `timestamps` (`_ct` and `_md`, written with `toISOString()`). A key
//!   attribute is the attribute saved as a table or index key; its `prefix`/`suffix`
//!   transformers (`USER` + delimiter `#`) become the template's literals. `computeKey` and
//!   links are functions a DTO does not carry: such keys are kept as plain columns, with a
//!   warning.
//! - **v0/v1**: the `new Entity({...})` options: `name`, `attributes` (`partitionKey`/`sortKey`
//!   flags, `prefix`/`suffix`, `map`/`alias`, composite keys `['sk', 0]` joined with `#`), the
//!   `table` options (`partitionKey`, `sortKey`, `indexes`, `entityField`, default `_et`), and
//!   `timestamps` (`created` `_ct`, `modified` `_md`).
//!
//! The input is one entity, an array of them, or an object of them.

use serde_json::{Map, Value as Json};

use super::{
    ColumnSpec, Cx, EntitySpec, ImportErrorKind, ImportErrors, Spec, TemplateText, column_name, push_attribute_column,
    table_name,
};

/// The default entity attribute.
pub const ENTITY_ATTRIBUTE: &str = "_et";

pub(crate) fn read(mut cx: Cx<'_>, json: &Json) -> Result<Spec, ImportErrors> {
    let entities: Vec<(String, &Json)> = match json {
        Json::Array(a) => a.iter().enumerate().map(|(i, e)| (format!("[{i}]"), e)).collect(),
        Json::Object(o) if o.contains_key("entityName") || o.contains_key("attributes") => vec![(String::new(), json)],
        Json::Object(o) => o.iter().map(|(k, v)| (k.clone(), v)).collect(),
        other => {
            cx.wrong_type(None, "(top level)", "an entity, an array or an object of entities", other);
            return Err(ImportErrors(cx.errors));
        }
    };
    if entities.is_empty() {
        cx.err(
            None,
            None,
            ImportErrorKind::NoEntities,
            Some("pass `entity.build(EntityDTO)` (v2) or the `new Entity({...})` options (v0/v1)".into()),
        );
    }
    let mut spec = Spec::default();
    let mut attrs: Vec<String> = Vec::new();
    for (at, json) in entities {
        let Some(o) = cx.object(None, &at, json) else { continue };
        let read = if o.contains_key("entityName") { v2(&mut cx, &at, o) } else { v0(&mut cx, &at, o) };
        if let Some((e, attr)) = read {
            if let Some(a) = attr
                && !attrs.contains(&a)
            {
                attrs.push(a);
            }
            spec.entities.push(e);
        }
    }
    match attrs.as_slice() {
        [one] => {
            spec.type_attribute = Some(one.clone());
            // The entity attribute routes every item; prefixes would only matter without it.
            for e in &mut spec.entities {
                e.key_prefix.clear();
            }
            spec.notes.push(format!(
                "dynamodb-toolbox conventions: `{one}` names the entity; timestamps are ISO 8601 strings."
            ));
        }
        [] => {
            spec.notes.push("dynamodb-toolbox entities without an entity attribute: routed by key prefixes.".into());
            for e in &mut spec.entities {
                e.match_values.clear();
            }
        }
        several => {
            cx.err(
                None,
                None,
                ImportErrorKind::Unsupported {
                    what: format!("entity attributes differing between entities: {}", several.join(", ")),
                },
                Some("one table has one entity attribute; import the entities of each table separately".into()),
            );
        }
    }
    if spec.type_attribute.is_none() {
        for e in &mut spec.entities {
            if e.key_prefix.is_empty() {
                cx.err(
                    Some(&e.name),
                    None,
                    ImportErrorKind::NoRouting { what: "without an entity attribute, its items".into() },
                    Some(
                        "keep the entity attribute (`entityAttribute: true`), or give its partition key a prefix"
                            .into(),
                    ),
                );
            }
        }
    }
    cx.finish(spec)
}

/// Key attribute names of a table, in order: partition, sort, then each index's.
fn table_keys(cx: &mut Cx<'_>, ent: Option<&str>, table: &Map<String, Json>, v2: bool) -> Vec<String> {
    let mut out = Vec::new();
    let name_of = |v: &Json| -> Option<String> {
        match v {
            Json::String(s) => Some(s.clone()),
            Json::Object(o) => o.get("name").and_then(Json::as_str).map(str::to_owned),
            _ => None,
        }
    };
    match table.get("partitionKey").and_then(name_of) {
        Some(pk) => out.push(pk),
        None => cx.missing(
            ent,
            "table.partitionKey",
            "the table",
            Some(
                if v2 {
                    "a DTO's table has `partitionKey: { name, type }`"
                } else {
                    "give the table options with `partitionKey`"
                }
                .into(),
            ),
        ),
    }
    if let Some(sk) = table.get("sortKey").and_then(name_of) {
        out.push(sk);
    }
    if let Some(Json::Object(indexes)) = table.get("indexes") {
        for idx in indexes.values() {
            for side in ["partitionKey", "sortKey"] {
                if let Some(k) = idx.get(side).and_then(name_of)
                    && !out.contains(&k)
                {
                    out.push(k);
                }
            }
        }
    }
    out
}

/// The attribute name of a table key: `pk` of `{ name: "pk" }`, or an index's key.
fn index_key(table: &Map<String, Json>, index: &str, side: &str) -> Option<String> {
    let v = table.get("indexes")?.get(index)?.get(side)?;
    match v {
        Json::String(s) => Some(s.clone()),
        other => other.get("name")?.as_str().map(str::to_owned),
    }
}

fn v2(cx: &mut Cx<'_>, at: &str, o: &Map<String, Json>) -> Option<(EntitySpec, Option<String>)> {
    let name = cx.opt_str(None, &format!("{at}.entityName"), o.get("entityName"))?.to_owned();
    let ent = Some(name.as_str());
    let table = match o.get("table") {
        Some(t) => cx.object(ent, "table", t)?,
        None => {
            cx.missing(ent, "table", "the DTO", Some("build the DTO from an entity bound to its table".into()));
            return None;
        }
    };
    let keys = table_keys(cx, ent, table, true);
    let entity_attribute = match o.get("entityAttribute") {
        Some(Json::Bool(false)) => None,
        _ => Some(
            cx.opt_str(ent, "table.entityAttributeSavedAs", table.get("entityAttributeSavedAs"))
                .unwrap_or(ENTITY_ATTRIBUTE)
                .to_owned(),
        ),
    };
    let mut e = EntitySpec {
        name: name.clone(),
        table: table_name(&name),
        match_values: vec![name.clone()],
        line: cx.pair_offset("entityName", &name).map(|o| cx.line_at(o)),
        ..EntitySpec::default()
    };
    let attributes = match o.get("schema").and_then(|s| s.get("attributes")) {
        Some(Json::Object(a)) => a,
        Some(other) => {
            cx.wrong_type(ent, "schema.attributes", "an object", other);
            return None;
        }
        None => {
            cx.missing(ent, "schema.attributes", "the DTO", None);
            return None;
        }
    };
    let mut plain: Vec<(String, String, &Map<String, Json>)> = Vec::new();
    let base = cx.pair_offset("entityName", &name).unwrap_or(0);
    // Key attributes first, in the table's key order, then the others as written.
    let mut attributes = cx.written_order(attributes.iter().collect(), base);
    let key_rank = |(an, def): &(&String, &Json)| {
        let stored = def.get("savedAs").and_then(Json::as_str).unwrap_or(an);
        keys.iter().position(|k| k == stored).unwrap_or(usize::MAX)
    };
    attributes.sort_by_key(key_rank);
    for (an, def) in attributes {
        let path = format!("schema.attributes.{an}");
        let Some(def) = cx.object(ent, &path, def) else { continue };
        let stored = cx.opt_str(ent, &format!("{path}.savedAs"), def.get("savedAs")).unwrap_or(an).to_owned();
        let linked = ["keyLink", "putLink", "updateLink", "keyDefault", "putDefault"].iter().find(|l| {
            def.get(**l).and_then(|d| d.get("linkerId").or_else(|| d.get("defaulterId"))).and_then(Json::as_str)
                == Some("custom")
        });
        if keys.contains(&stored) {
            let generated = def.get("hidden").and_then(Json::as_bool) == Some(true)
                && an == &stored
                && def.get("transform").is_none();
            if let Some(l) = linked {
                e.unsupported.push((format!("{path}.{l}"), format!("key `{stored}` is computed by a function (`{l}`), which a DTO does not carry; kept as a string column (write its template in `keys`)")));
                plain.push((an.clone(), stored, def));
                continue;
            }
            if generated {
                e.unsupported.push((path.clone(), format!("key `{stored}` is computed (`computeKey`), which a DTO does not carry; kept as a string column (write its template in `keys`)")));
                plain.push((an.clone(), stored, def));
                continue;
            }
            let ty = match def.get("type").and_then(Json::as_str) {
                Some("number") => "decimal",
                _ => "string",
            };
            let mut wrap: (String, String) = (String::new(), String::new());
            if let Some(tr) = def.get("transform")
                && !apply_transform(&mut wrap, tr)
            {
                e.unsupported.push((
                    format!("{path}.transform"),
                    format!("key `{stored}` has a custom transformer; kept as a string column"),
                ));
                plain.push((an.clone(), stored, def));
                continue;
            }
            let mut t = TemplateText::default();
            t.literal(&wrap.0);
            // `.const("PROFILE")`: one allowed value, so the key is constant.
            match def.get("enum").and_then(Json::as_array).map(Vec::as_slice) {
                Some([Json::String(only)]) => t.literal(only),
                _ => {
                    let ph = e.placeholders.claim(an, ty, &stored, None);
                    t.placeholder(&ph, ty);
                }
            }
            t.literal(&wrap.1);
            if !wrap.0.is_empty() && keys.first() == Some(&stored) {
                e.key_prefix.push((stored.clone(), wrap.0.clone()));
            }
            e.keys.push((stored, t.0));
            continue;
        }
        if let Some(l) = linked {
            e.unsupported.push((format!("{path}.{l}"), "computed by a function; kept as a plain column".into()));
        }
        plain.push((an.clone(), stored, def));
    }
    e.columns = e.placeholders.columns(&|_| false);
    for (an, stored, def) in plain {
        let required = !matches!(def.get("required").and_then(Json::as_str), Some("never"));
        let c = ColumnSpec { name: column_name(&an), ty: Some(v2_type(def)), required, ..ColumnSpec::default() };
        push_attribute_column(&mut e, c, &stored);
    }
    timestamps(&mut e, o.get("timestamps"), true);
    if let Some(a) = &entity_attribute {
        e.drop.retain(|d| d != a);
    }
    Some((e, entity_attribute))
}

/// Applies a v2 transformer DTO to the (prefix, suffix) around a value; `false` for a custom one.
fn apply_transform(wrap: &mut (String, String), tr: &Json) -> bool {
    match tr.get("transformerId").and_then(Json::as_str) {
        Some("prefix") => {
            let p = tr.get("prefix").and_then(Json::as_str).unwrap_or_default();
            let d = tr.get("delimiter").and_then(Json::as_str).unwrap_or("#");
            wrap.0 = format!("{p}{d}{}", wrap.0);
            true
        }
        Some("suffix") => {
            let s = tr.get("suffix").and_then(Json::as_str).unwrap_or_default();
            let d = tr.get("delimiter").and_then(Json::as_str).unwrap_or("#");
            wrap.1 = format!("{}{d}{s}", wrap.1);
            true
        }
        Some("pipe") => tr
            .get("transformers")
            .and_then(Json::as_array)
            .is_some_and(|ts| ts.iter().all(|t| apply_transform(wrap, t))),
        _ => false,
    }
}

fn v2_type(def: &Map<String, Json>) -> String {
    let ty = def.get("type").and_then(Json::as_str).unwrap_or("any");
    match ty {
        "string" => "string".into(),
        "number" => "decimal".into(),
        "boolean" => "bool".into(),
        "binary" => "binary".into(),
        "set" => match def.get("elements").and_then(|e| e.get("type")).and_then(Json::as_str) {
            Some("string") => "set<string>".into(),
            Some("number") => "set<decimal>".into(),
            Some("binary") => "set<binary>".into(),
            _ => "json".into(),
        },
        "list" => match def.get("elements").and_then(Json::as_object) {
            Some(el) => format!("list<{}>", v2_type(el)),
            None => "json".into(),
        },
        "record" => match def.get("elements").and_then(Json::as_object) {
            Some(el) => format!("map<string, {}>", v2_type(el)),
            None => "json".into(),
        },
        _ => "json".into(),
    }
}

/// `created`/`modified` columns from `timestamps` (`true` by default in v2, as in v0).
fn timestamps(e: &mut EntitySpec, option: Option<&Json>, default: bool) {
    let (on, created, modified) = match option {
        None => (default, None, None),
        Some(Json::Bool(b)) => (*b, None, None),
        Some(Json::Object(o)) => (true, o.get("created"), o.get("modified")),
        Some(_) => (default, None, None),
    };
    if !on {
        return;
    }
    for (which, default_name, default_saved) in [(created, "created", "_ct"), (modified, "modified", "_md")] {
        if matches!(which, Some(Json::Bool(false))) {
            continue;
        }
        let name = which.and_then(|w| w.get("name")).and_then(Json::as_str).unwrap_or(default_name);
        let saved = which.and_then(|w| w.get("savedAs")).and_then(Json::as_str).unwrap_or(default_saved);
        let c = ColumnSpec {
            name: column_name(name),
            ty: Some("timestamp".into()),
            format: Some("iso8601".into()),
            ..ColumnSpec::default()
        };
        push_attribute_column(e, c, saved);
    }
}

fn v0(cx: &mut Cx<'_>, at: &str, o: &Map<String, Json>) -> Option<(EntitySpec, Option<String>)> {
    let name = match o.get("name") {
        Some(Json::String(s)) => s.clone(),
        Some(other) => {
            cx.wrong_type(None, &format!("{at}.name"), "a string", other);
            return None;
        }
        None => {
            cx.missing(
                None,
                &format!("{at}.name"),
                "the entity",
                Some("v0/v1 entities have `name` and `attributes`; v2 DTOs have `entityName`".into()),
            );
            return None;
        }
    };
    let ent = Some(name.as_str());
    let empty = Map::new();
    let table = match o.get("table") {
        Some(t) => cx.object(ent, "table", t)?,
        None => &empty,
    };
    let pk = table.get("partitionKey").and_then(Json::as_str);
    let sk = table.get("sortKey").and_then(Json::as_str);
    let entity_attribute = match (o.get("typeHidden"), table.get("entityField")) {
        (_, Some(Json::Bool(false))) => None,
        (_, Some(Json::String(f))) => Some(f.clone()),
        _ => Some(ENTITY_ATTRIBUTE.to_owned()),
    };
    let mut e = EntitySpec {
        name: name.clone(),
        table: table_name(&name),
        match_values: vec![name.clone()],
        line: cx.pair_offset("name", &name).map(|o| cx.line_at(o)),
        ..EntitySpec::default()
    };
    let attributes = match o.get("attributes") {
        Some(Json::Object(a)) => a,
        Some(other) => {
            cx.wrong_type(ent, "attributes", "an object", other);
            return None;
        }
        None => {
            cx.missing(ent, "attributes", "the entity", None);
            return None;
        }
    };
    // Which stored key each key attribute is, and the composites of each.
    struct Key<'j> {
        stored: String,
        attribute: String,
        def: &'j Map<String, Json>,
        parts: Vec<(u64, String, String)>, // (position, attribute, stored name)
    }
    let mut key_list: Vec<Key<'_>> = Vec::new();
    let mut plain: Vec<(String, String, &Map<String, Json>)> = Vec::new();
    let mut composites: Vec<(String, u64, String, String)> = Vec::new(); // (key attribute, pos, attr, stored)
    for (an, def) in attributes {
        let path = format!("attributes.{an}");
        match def {
            Json::String(_) => plain.push((an.clone(), an.clone(), &empty)),
            Json::Array(c) => {
                let key = c.first().and_then(Json::as_str);
                let pos = c.get(1).and_then(Json::as_u64);
                let (Some(key), Some(pos)) = (key, pos) else {
                    cx.wrong_type(ent, &path, "a composite `[key, position]`", def);
                    continue;
                };
                let save = c.get(2).and_then(|o| o.get("save")).and_then(Json::as_bool).unwrap_or(true);
                let stored = if save { an.clone() } else { String::new() };
                composites.push((key.to_owned(), pos, an.clone(), stored));
            }
            Json::Object(d) => {
                let stored = d
                    .get("map")
                    .or_else(|| d.get("alias").filter(|_| false))
                    .and_then(Json::as_str)
                    .unwrap_or(an)
                    .to_owned();
                let role = |flag: &str, table_key: Option<&str>, index_side: &str| -> Option<String> {
                    match d.get(flag) {
                        Some(Json::Bool(true)) => table_key.map(str::to_owned),
                        Some(Json::String(index)) => index_key(table, index, index_side),
                        _ => None,
                    }
                };
                let stored_key = role("partitionKey", pk, "partitionKey").or_else(|| role("sortKey", sk, "sortKey"));
                let flagged = d.get("partitionKey").is_some_and(|v| v != &Json::Bool(false))
                    || d.get("sortKey").is_some_and(|v| v != &Json::Bool(false));
                match stored_key {
                    Some(k) => key_list.push(Key { stored: k, attribute: an.clone(), def: d, parts: Vec::new() }),
                    None if flagged => {
                        cx.missing(ent, "table.partitionKey", "the entity's `table`", Some(format!("`{an}` is a key: give the table options (`partitionKey`, `sortKey`, `indexes`) so its stored name is known")));
                    }
                    None => {
                        if d.get("prefix").is_some() || d.get("suffix").is_some() {
                            e.unsupported.push((
                                path.clone(),
                                "prefix or suffix on a non-key attribute: the column holds the stored text".into(),
                            ));
                        }
                        plain.push((an.clone(), stored, d));
                    }
                }
            }
            other => cx.wrong_type(ent, &path, "an attribute definition", other),
        }
    }
    for (key, pos, attr, stored) in composites {
        match key_list.iter_mut().find(|k| k.attribute == key) {
            Some(k) => k.parts.push((pos, attr, stored)),
            None => cx.err(
                ent,
                Some(format!("attributes.{attr}")),
                ImportErrorKind::UnknownKey { name: key.clone() },
                Some(format!(
                    "a composite names its key attribute: `{key}` must be an attribute with `partitionKey` or `sortKey`"
                )),
            ),
        }
    }
    for k in &mut key_list {
        k.parts.sort();
        let prefix = k.def.get("prefix").and_then(Json::as_str).unwrap_or_default();
        let suffix = k.def.get("suffix").and_then(Json::as_str).unwrap_or_default();
        let mut t = TemplateText::default();
        t.literal(prefix);
        if k.parts.is_empty() {
            let ty = if k.def.get("type").and_then(Json::as_str) == Some("number") { "decimal" } else { "string" };
            let ph = e.placeholders.claim(&k.attribute, ty, &k.stored, None);
            t.placeholder(&ph, ty);
        } else {
            for (i, (_, attr, stored)) in k.parts.iter().enumerate() {
                if i > 0 {
                    t.literal("#");
                }
                let copy = (!stored.is_empty()).then_some(stored.as_str());
                let ph = e.placeholders.claim(attr, "string", &k.stored, copy);
                t.placeholder(&ph, "string");
            }
        }
        t.literal(suffix);
        if !prefix.is_empty() && Some(k.stored.as_str()) == pk {
            e.key_prefix.push((k.stored.clone(), prefix.to_owned()));
        }
        e.keys.push((k.stored.clone(), t.0));
    }
    e.columns = e.placeholders.columns(&|_| false);
    for (an, stored, def) in plain {
        let ty = match def.get("type").and_then(Json::as_str).unwrap_or("string") {
            "string" => "string",
            "number" => "decimal",
            "boolean" => "bool",
            "binary" => "binary",
            "set" => match def.get("setType").and_then(Json::as_str) {
                Some("string") => "set<string>",
                Some("number") => "set<decimal>",
                Some("binary") => "set<binary>",
                _ => "json",
            },
            _ => "json",
        };
        let required = def.get("required").is_some_and(|r| r == &Json::Bool(true) || r.as_str() == Some("always"));
        let c = ColumnSpec { name: column_name(&an), ty: Some(ty.into()), required, ..ColumnSpec::default() };
        push_attribute_column(&mut e, c, &stored);
    }
    let created = o.get("created").and_then(Json::as_str).unwrap_or("_ct");
    let modified = o.get("modified").and_then(Json::as_str).unwrap_or("_md");
    let on = o.get("timestamps").and_then(Json::as_bool).unwrap_or(true);
    if on {
        for (name, saved) in [("created", created), ("modified", modified)] {
            let c = ColumnSpec {
                name: name.into(),
                ty: Some("timestamp".into()),
                format: Some("iso8601".into()),
                ..ColumnSpec::default()
            };
            push_attribute_column(&mut e, c, saved);
        }
    }
    Some((e, entity_attribute))
}
