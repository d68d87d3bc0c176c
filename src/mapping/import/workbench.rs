//! NoSQL Workbench data models (the JSON its data modeler exports) as mappings.
//!
//! A model lists tables (`DataModel`), each with its key attributes (`KeyAttributes`:
//! `PartitionKey`, `SortKey`), typed `NonKeyAttributes`, `GlobalSecondaryIndexes` and facets
//! (`TableFacets`): one per access pattern or entity, with aliases for the key attributes
//! (`KeyAttributeAlias`: `PartitionKeyAlias`, `SortKeyAlias`), the attributes it uses and
//! sample items (`TableData`, DynamoDB JSON). Aliases are names, not templates, so the key
//! templates come from the facet's sample items, proposed the way `etl mapping infer` does;
//! a facet without samples keeps each key whole in one column named after its alias. Entities
//! are routed by a discriminator attribute when the samples carry one, else by key prefixes.

use std::collections::BTreeSet;

use serde_json::{Map, Value as Json};

use super::{
    ColumnSpec, Cx, EntitySpec, ImportErrorKind, ImportErrors, Spec, TemplateText, column_name, push_attribute_column,
    table_name,
};
use crate::mapping::draft::DISCRIMINATORS;
use crate::mapping::keyinfer::{KeySample, infer_template};
use crate::mapping::template::KeyTemplate;

pub(crate) fn read(mut cx: Cx<'_>, json: &Json) -> Result<Spec, ImportErrors> {
    let Some(top) = cx.object(None, "(top level)", json) else { return Err(ImportErrors(cx.errors)) };
    let tables = match top.get("DataModel") {
        Some(Json::Array(t)) => t,
        Some(other) => {
            cx.wrong_type(None, "DataModel", "an array of tables", other);
            return Err(ImportErrors(cx.errors));
        }
        None => {
            cx.missing(
                None,
                "DataModel",
                "the model",
                Some("export the data model from NoSQL Workbench's data modeler (JSON)".into()),
            );
            return Err(ImportErrors(cx.errors));
        }
    };
    let table = match tables.as_slice() {
        [t] => t,
        [] => {
            cx.err(
                None,
                Some("DataModel".into()),
                ImportErrorKind::NoEntities,
                Some("add a table to the data model".into()),
            );
            return Err(ImportErrors(cx.errors));
        }
        many => {
            let names: Vec<&str> = many.iter().filter_map(|t| t.get("TableName")?.as_str()).collect();
            cx.err(
                None,
                Some("DataModel".into()),
                ImportErrorKind::Unsupported {
                    what: format!("data model with {} tables ({})", many.len(), names.join(", ")),
                },
                Some("a mapping describes one table's export: export a data model holding that table alone".into()),
            );
            return Err(ImportErrors(cx.errors));
        }
    };
    let Some(table) = cx.object(None, "DataModel[0]", table) else { return Err(ImportErrors(cx.errors)) };
    let key_name = |ka: Option<&Json>, side: &str| -> Option<String> {
        ka?.get(side)?.get("AttributeName")?.as_str().map(str::to_owned)
    };
    let Some(pk) = key_name(table.get("KeyAttributes"), "PartitionKey") else {
        cx.missing(None, "DataModel[0].KeyAttributes.PartitionKey.AttributeName", "the table", None);
        return Err(ImportErrors(cx.errors));
    };
    let mut keys = vec![pk.clone()];
    if let Some(sk) = key_name(table.get("KeyAttributes"), "SortKey") {
        keys.push(sk);
    }
    let primary = keys.len();
    for gsi in table.get("GlobalSecondaryIndexes").and_then(Json::as_array).into_iter().flatten() {
        for side in ["PartitionKey", "SortKey"] {
            if let Some(k) = key_name(gsi.get("KeyAttributes"), side)
                && !keys.contains(&k)
            {
                keys.push(k);
            }
        }
    }
    let mut types: Vec<(String, String)> = Vec::new();
    for a in table.get("NonKeyAttributes").and_then(Json::as_array).into_iter().flatten() {
        if let (Some(n), Some(t)) =
            (a.get("AttributeName").and_then(Json::as_str), a.get("AttributeType").and_then(Json::as_str))
        {
            types.push((n.to_owned(), t.to_owned()));
        }
    }
    let facets = match table.get("TableFacets") {
        Some(Json::Array(f)) if !f.is_empty() => f,
        _ => {
            cx.err(
                None,
                Some("DataModel[0].TableFacets".into()),
                ImportErrorKind::NoEntities,
                Some("add a facet per entity in NoSQL Workbench's data modeler".into()),
            );
            return Err(ImportErrors(cx.errors));
        }
    };

    struct Facet<'j> {
        name: String,
        aliases: Vec<(String, String)>,
        samples: Vec<&'j Map<String, Json>>,
        attributes: Vec<String>,
        line: Option<usize>,
    }
    let mut list: Vec<Facet<'_>> = Vec::new();
    for (i, f) in facets.iter().enumerate() {
        let path = format!("TableFacets[{i}]");
        let Some(f) = cx.object(None, &path, f) else { continue };
        let Some(name) = cx.opt_str(None, &format!("{path}.FacetName"), f.get("FacetName")) else {
            cx.missing(None, &format!("{path}.FacetName"), "a facet", None);
            continue;
        };
        let alias = f.get("KeyAttributeAlias");
        let mut aliases = Vec::new();
        for (side, key) in [("PartitionKeyAlias", keys.first()), ("SortKeyAlias", keys.get(1).filter(|_| primary > 1))]
        {
            if let (Some(a), Some(k)) = (alias.and_then(|a| a.get(side)).and_then(Json::as_str), key) {
                aliases.push((k.clone(), a.to_owned()));
            }
        }
        let samples: Vec<&Map<String, Json>> =
            f.get("TableData").and_then(Json::as_array).into_iter().flatten().filter_map(Json::as_object).collect();
        let attributes = f
            .get("NonKeyAttributes")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(Json::as_str)
            .map(str::to_owned)
            .collect();
        list.push(Facet {
            name: name.to_owned(),
            aliases,
            samples,
            attributes,
            line: cx.line_of_key(name).or_else(|| find_value_line(cx.text, name)),
        });
    }

    // A discriminator: an attribute every sample of every facet has as a string, with values no
    // two facets share.
    let discriminator = DISCRIMINATORS.iter().map(|(d, _)| *d).find(|d| {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        list.iter().all(|f| {
            !f.samples.is_empty() && {
                let values: BTreeSet<&str> = f.samples.iter().filter_map(|s| s.get(*d)?.get("S")?.as_str()).collect();
                let all = f.samples.iter().all(|s| s.get(*d).and_then(|v| v.get("S")).is_some());
                all && values.iter().all(|v| seen.insert(v))
            }
        })
    });
    let mut spec = Spec {
        type_attribute: discriminator.map(str::to_owned),
        notes: vec![match discriminator {
            Some(d) => format!(
                "NoSQL Workbench facets, told apart by `{d}` in their sample items; key templates proposed from the samples."
            ),
            None => "NoSQL Workbench facets, told apart by key prefixes; key templates proposed from the sample items."
                .into(),
        }],
        entities: Vec::new(),
    };

    for f in &list {
        let ent = Some(f.name.as_str());
        let mut e =
            EntitySpec { name: f.name.clone(), table: table_name(&f.name), line: f.line, ..EntitySpec::default() };
        if let Some(d) = discriminator {
            let values: BTreeSet<&str> = f.samples.iter().filter_map(|s| s.get(d)?.get("S")?.as_str()).collect();
            e.match_values = values.into_iter().map(str::to_owned).collect();
            e.drop.push(d.to_owned());
        }
        for (ki, key) in keys.iter().enumerate() {
            let texts: Vec<(String, Vec<(String, String)>)> = f
                .samples
                .iter()
                .filter_map(|s| {
                    let k = scalar_text(s.get(key)?)?;
                    let attrs = s
                        .iter()
                        .filter(|(n, _)| !keys.contains(n))
                        .filter_map(|(n, v)| Some((n.clone(), scalar_text(v)?)))
                        .collect();
                    Some((k, attrs))
                })
                .collect();
            if texts.is_empty() {
                if ki < primary && f.samples.is_empty() {
                    let alias = f.aliases.iter().find(|(k, _)| k == key).map_or(key.as_str(), |(_, a)| a.as_str());
                    let ph = e.placeholders.claim(alias, "string", key, None);
                    let mut t = TemplateText::default();
                    t.placeholder(&ph, "string");
                    e.keys.push((key.clone(), t.0));
                    e.unsupported.push((key.clone(), format!("no sample items: key `{key}` is kept whole in column `{ph}` (add samples to the facet for a template)")));
                }
                continue;
            }
            let pairs: Vec<Vec<(&str, &str)>> =
                texts.iter().map(|(_, a)| a.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect()).collect();
            let samples: Vec<KeySample<'_>> =
                texts.iter().zip(&pairs).map(|((k, _), a)| KeySample { key: k, attributes: a }).collect();
            let taken: Vec<&str> = f.attributes.iter().map(String::as_str).collect();
            let Some(inferred) = infer_template(key, &samples, &taken) else { continue };
            if inferred.matched < inferred.total {
                e.unsupported.push((
                    key.clone(),
                    format!(
                        "the proposed template `{}` matches {} of {} sample keys",
                        inferred.template, inferred.matched, inferred.total
                    ),
                ));
            }
            let mut template = inferred.template.clone();
            for p in &inferred.placeholders {
                let ty = p.ty.to_string();
                let name = e.placeholders.claim(&p.name, &ty, key, p.equals_attribute.as_deref());
                if name != p.name {
                    template = rename_placeholder(&template, &p.name, &name);
                }
            }
            if discriminator.is_none() && ki < primary {
                let prefix = KeyTemplate::parse(&template).map(|t| t.literal_prefix().to_owned()).unwrap_or_default();
                if !prefix.is_empty() {
                    e.key_prefix.push((key.clone(), prefix));
                }
            }
            e.keys.push((key.clone(), template));
        }
        if discriminator.is_none() && e.key_prefix.is_empty() {
            cx.err(
                ent,
                Some("TableData".into()),
                ImportErrorKind::NoRouting { what: format!("facet `{}`", f.name) },
                Some("give its sample items a type attribute (such as `Type`), or keys with a literal prefix (`USER#...`)".into()),
            );
            continue;
        }
        e.columns = e.placeholders.columns(&|_| false);
        let mut names: Vec<&str> = f.attributes.iter().map(String::as_str).collect();
        for s in &f.samples {
            for n in s.keys() {
                if !names.contains(&n.as_str()) && !keys.contains(n) {
                    names.push(n);
                }
            }
        }
        for n in names {
            if Some(n) == discriminator || keys.iter().any(|k| k == n) {
                continue;
            }
            let ty = types.iter().find(|(a, _)| a == n).map_or("json", |(_, t)| column_type(t));
            let c = ColumnSpec { name: column_name(n), ty: Some(ty.into()), ..ColumnSpec::default() };
            push_attribute_column(&mut e, c, n);
        }
        spec.entities.push(e);
    }
    cx.finish(spec)
}

/// The text of an `S` or `N` sample value.
fn scalar_text(v: &Json) -> Option<String> {
    let (tag, payload) = v.as_object()?.iter().next()?;
    match tag.as_str() {
        "S" | "N" => payload.as_str().map(str::to_owned),
        _ => None,
    }
}

fn column_type(t: &str) -> &'static str {
    match t {
        "S" => "string",
        "N" => "decimal",
        "B" => "binary",
        "BOOL" => "bool",
        "SS" => "set<string>",
        "NS" => "set<decimal>",
        "BS" => "set<binary>",
        _ => "json",
    }
}

/// `{old}` / `{old:type}` renamed in template text.
fn rename_placeholder(template: &str, old: &str, new: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let needle = format!("{{{old}");
    while let Some(i) = rest.find(&needle) {
        let after = &rest[i + needle.len()..];
        let escaped = rest[..i].ends_with('\\') && !rest[..i].ends_with("\\\\");
        out.push_str(&rest[..i]);
        if !escaped && (after.starts_with('}') || after.starts_with(':')) {
            out.push('{');
            out.push_str(new);
        } else {
            out.push_str(&needle);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The line of the first `"FacetName": "name"`, for comments.
fn find_value_line(text: &str, name: &str) -> Option<usize> {
    let quoted = serde_json::to_string(name).ok()?;
    let at = text.find(&format!("\"FacetName\": {quoted}")).or_else(|| text.find(&quoted))?;
    Some(text[..at].matches('\n').count() + 1)
}
