//! `etl mapping import` end to end, one test per model format: the example model under
//! `mappings/examples/`, an export of items written by that library's own key-building rules
//! (the generators below are the oracle, written from the libraries' source, not from our
//! importer), the imported mapping, `etl mapping check` with no failure, and an unwind with no
//! reject whose typed key columns hold the values the keys were built from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType};
use serde_json::{Value as Json, json};

use crate::common::*;

fn example(name: &str) -> PathBuf {
    root().join("mappings/examples").join(name)
}

/// An export holding `items` (DynamoDB JSON `Item`s) in one gzip data file.
fn export_of(dir: &Path, items: &[Json]) -> PathBuf {
    let mut lines = String::new();
    for it in items {
        lines.push_str(&json!({ "Item": it }).to_string());
        lines.push('\n');
    }
    write_export(dir, &[gzip(lines.as_bytes())], &[items.len() as u64]);
    dir.to_owned()
}

fn s(v: &str) -> Json {
    json!({ "S": v })
}

fn n(v: &str) -> Json {
    json!({ "N": v })
}

/// `etl mapping import`, then `mapping check` (0 failures) and `unwind` (0 rejects) on `export`.
/// Returns the unwind's output folder and the import's stderr.
fn import_check_unwind(tmp: &Path, from: &str, model: &Path, export: &Path) -> (PathBuf, String) {
    let mapping = tmp.join(format!("{from}.toml"));
    let r = etl(["mapping", "import", "--from", from, model.to_str().unwrap(), "--out", mapping.to_str().unwrap()]);
    assert_eq!(r.code, 0, "import:\n{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.is_empty(), "with --out nothing goes to stdout: {}", r.stdout);
    let text = std::fs::read_to_string(&mapping).unwrap();
    // The same mapping on stdout without `--out`.
    let printed = etl(["mapping", "import", "--from", from, model.to_str().unwrap()]);
    assert_eq!((printed.code, printed.stdout.as_str()), (0, text.as_str()), "{}", printed.stderr);

    let check = etl(["mapping", "check", "--mapping", mapping.to_str().unwrap(), export.to_str().unwrap()]);
    assert_eq!(check.code, 0, "check of\n{text}\n{}\n{}", check.stdout, check.stderr);
    let out = tmp.join("out");
    let run = unwind(&[export], &out, &["--mapping", mapping.to_str().unwrap()], 0);
    assert!(run.stderr.contains("every item accounted for"), "{}", run.stderr);
    assert_eq!(count_rows(&out.join("_rejects")), 0, "{text}");
    (out, r.stderr)
}

/// One column of a table as text per row (timestamps as epoch integers in their unit),
/// keyed by the values of `key_column`.
fn column(dir: &Path, key_column: &str, column: &str) -> BTreeMap<String, Option<String>> {
    let (schema, batches) = read_table(dir);
    let ki = schema.index_of(key_column).unwrap_or_else(|_| panic!("no `{key_column}` in {schema:?}"));
    let ci = schema.index_of(column).unwrap_or_else(|_| panic!("no `{column}` in {schema:?}"));
    let mut out = BTreeMap::new();
    for b in &batches {
        let (k, c) = (b.column(ki), b.column(ci));
        for r in 0..b.num_rows() {
            let key = text(k.as_ref(), r).expect("key column has a value");
            out.insert(key, text(c.as_ref(), r));
        }
    }
    out
}

fn text(a: &dyn Array, r: usize) -> Option<String> {
    if a.is_null(r) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            a.as_primitive::<TimestampMillisecondType>().value(r).to_string()
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            a.as_primitive::<TimestampMicrosecondType>().value(r).to_string()
        }
        DataType::Int64 => a.as_primitive::<Int64Type>().value(r).to_string(),
        _ => cell(a, r).and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| panic!("{}", a.data_type())),
    })
}

fn assert_column(dir: &Path, key: &str, col: &str, want: &[(&str, &str)]) {
    let got = column(dir, key, col);
    let want: BTreeMap<String, Option<String>> =
        want.iter().map(|(k, v)| ((*k).to_owned(), Some((*v).to_owned()))).collect();
    assert_eq!(got, want, "{}.{col}", dir.display());
}

// ---------------------------------------------------------------------------------------------
// ElectroDB: `_makeKeyFixings` and `_makeKey` (src/entity.js), `formatKeyCasing` (src/util.js).
// ---------------------------------------------------------------------------------------------

/// A key as ElectroDB builds it: prefix, `#label_value` per composite, postfix, then the casing.
fn edb_key(prefix: &str, composites: &[(&str, &str)], postfix: &str, casing: &str) -> String {
    let mut key = prefix.to_owned();
    for (label, value) in composites {
        key.push_str(&format!("#{label}_{value}"));
    }
    key.push_str(postfix);
    match casing {
        "upper" => key.to_uppercase(),
        "none" => key,
        _ => key.to_lowercase(),
    }
}

fn electrodb_items() -> Vec<Json> {
    let mut items = Vec::new();
    let employees = [
        ("JDoe42", "Jane", "Doe", "Gw-Zoo", "Senior Engineer", "development", "185000"),
        ("MSmith", "Max", "Smith", "Gw-Zoo", "Designer", "product", "120500.5"),
        ("ÉLodie", "Élodie", "Martin", "Paris-Nord", "CFO", "finance", "240000"),
    ];
    for (id, first, last, office, title, team, salary) in employees {
        items.push(json!({
            "pk": s(&edb_key("$taskapp", &[("employee", id)], "", "default")),
            "sk": s(&edb_key("$employee_1", &[], "", "default")),
            "gsi1pk": s(&edb_key("$taskapp", &[("office", office)], "", "default")),
            "gsi1sk": s(&edb_key("$workplaces#employee_1", &[("team", team), ("title", title), ("employee", id)], "", "default")),
            "employee": s(id), "firstName": s(first), "lastName": s(last), "office": s(office), "title": s(title),
            "team": s(team), "salary": n(salary),
            "address": { "M": { "street": s("1 Main St"), "city": s("Springfield"), "postalCode": s("01234") } },
            "__edb_e__": s("employee"), "__edb_v__": s("1"),
        }));
    }
    let tasks = [
        ("T-0001", "Apollo-11", "JDoe42", "open", "5", "Launch plan"),
        ("T-0002", "Apollo-11", "MSmith", "in-progress", "0.5", "Mockups"),
        ("T-0003", "Gemini", "JDoe42", "closed", "13", "Retro"),
    ];
    for (task, project, employee, status, points, description) in tasks {
        items.push(json!({
            "pk": s(&edb_key("$taskapp", &[("task", task)], "", "default")),
            "sk": s(&edb_key("$task_1", &[("project", project), ("employee", employee)], "", "default")),
            "gsi3pk": s(&edb_key("$taskapp", &[("employee", employee)], "", "default")),
            "gsi3sk": s(&edb_key("$assignments#task_1", &[("project", project), ("status", status)], "", "default")),
            // A custom template (`PROJECT#${project}`, casing none) and an upper-cased key.
            "gsi2pk": s(&format!("PROJECT#{project}")),
            "gsi2sk": s(&edb_key("$task_1", &[("status", status), ("points", points)], "", "upper")),
            "task": s(task), "project": s(project), "employee": s(employee), "status": s(status),
            "points": n(points), "description": s(description),
            "tags": { "SS": ["urgent", "q3"] },
            "comments": { "L": [ { "M": { "by": s("MSmith"), "text": s("ok") } } ] },
            "updated_at": n("1717171717000"),
            "__edb_e__": s("task"), "__edb_v__": s("1"),
        }));
    }
    items
}

#[test]
fn electrodb_model_imports_and_unwinds_its_items() {
    let tmp = tempfile::tempdir().unwrap();
    let export = export_of(&tmp.path().join("export"), &electrodb_items());
    let (out, stderr) = import_check_unwind(tmp.path(), "electrodb", &example("electrodb.json"), &export);
    assert!(
        stderr.contains("warning: not carried over: entity `task`, field `attributes.updatedAt.watch`"),
        "{stderr}"
    );

    // Key columns hold the attributes' values, case kept, though the keys are lower-cased.
    let employee = out.join("employee");
    assert_column(
        &employee,
        "employee",
        "employee",
        &[("JDoe42", "JDoe42"), ("MSmith", "MSmith"), ("ÉLodie", "ÉLodie")],
    );
    assert_column(
        &employee,
        "employee",
        "office",
        &[("JDoe42", "Gw-Zoo"), ("MSmith", "Gw-Zoo"), ("ÉLodie", "Paris-Nord")],
    );
    assert_column(
        &employee,
        "employee",
        "title",
        &[("JDoe42", "Senior Engineer"), ("MSmith", "Designer"), ("ÉLodie", "CFO")],
    );
    assert_column(
        &employee,
        "employee",
        "team",
        &[("JDoe42", "development"), ("MSmith", "product"), ("ÉLodie", "finance")],
    );
    assert_column(
        &employee,
        "employee",
        "salary",
        &[("JDoe42", "185000"), ("MSmith", "120500.5"), ("ÉLodie", "240000")],
    );
    let task = out.join("task");
    assert_column(&task, "task", "project", &[("T-0001", "Apollo-11"), ("T-0002", "Apollo-11"), ("T-0003", "Gemini")]);
    assert_column(&task, "task", "employee", &[("T-0001", "JDoe42"), ("T-0002", "MSmith"), ("T-0003", "JDoe42")]);
    assert_column(&task, "task", "status", &[("T-0001", "open"), ("T-0002", "in-progress"), ("T-0003", "closed")]);
    assert_column(&task, "task", "points", &[("T-0001", "5"), ("T-0002", "0.5"), ("T-0003", "13")]);
    assert_column(
        &task,
        "task",
        "updated_at",
        &[("T-0001", "1717171717000"), ("T-0002", "1717171717000"), ("T-0003", "1717171717000")],
    );
}

// ---------------------------------------------------------------------------------------------
// OneTable: `runTemplate` (`${name}`, `${name:len:pad}`) and `transformWriteDate` (src/Model.js).
// ---------------------------------------------------------------------------------------------

/// JavaScript's `new Date(ms).toISOString()`.
fn to_iso_string(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `${name:len:pad}`: left-padded to `len` with `pad`.
fn pad(value: &str, len: usize, pad: char) -> String {
    let mut s = value.to_owned();
    while s.chars().count() < len {
        s.insert(0, pad);
    }
    s
}

fn onetable_items() -> Vec<Json> {
    let stamp = s(&to_iso_string(1_717_000_000_000));
    let mut items = vec![
        json!({ "pk": s("account#01HZX3K9ACME"), "sk": s("account#"), "_type": s("Account"), "id": s("01HZX3K9ACME"),
                "name": s("Acme"), "balance": n("1200.5"), "created": stamp, "updated": stamp }),
        json!({ "pk": s("account#01HZX3K9INITECH"), "sk": s("account#"), "_type": s("Account"), "id": s("01HZX3K9INITECH"),
                "name": s("Initech"), "balance": n("0"), "created": stamp, "updated": stamp }),
    ];
    for (account, email, name, role, registered) in [
        ("01HZX3K9ACME", "ada@acme.test", "Ada", "admin", 1_700_000_000_000i64),
        ("01HZX3K9ACME", "Bob.Lee@acme.test", "Bob", "user", 1_700_000_000_123),
        ("01HZX3K9INITECH", "peter@initech.test", "Peter", "user", 1_650_000_000_000),
    ] {
        items.push(json!({
            "pk": s(&format!("account#{account}")), "sk": s(&format!("user#{email}")),
            "gs1pk": s(&format!("user-email#{email}")), "gs1sk": s("user#"),
            "_type": s("User"), "accountId": s(account), "email": s(email), "fullName": s(name), "role": s(role),
            "registered": s(&to_iso_string(registered)),
            "data": { "M": { "profile": { "M": { "avatar": s("a.png") } } } },
            "created": stamp, "updated": stamp,
        }));
    }
    for (account, issued, number, amount, paid) in [
        ("01HZX3K9ACME", 1_709_294_400_000i64, 42i64, "99.95", true),
        ("01HZX3K9ACME", 1_709_294_400_001, 43, "10", false),
        ("01HZX3K9INITECH", 1_577_836_800_000, 123456, "0.01", false),
    ] {
        items.push(json!({
            "pk": s(&format!("account#{account}")),
            "sk": s(&format!("invoice#{}#{}", to_iso_string(issued), pad(&number.to_string(), 6, '0'))),
            "_type": s("Invoice"), "accountId": s(account), "issued": s(&to_iso_string(issued)),
            "number": n(&number.to_string()), "amount": n(amount), "paid": { "BOOL": paid },
            "lines": { "L": [ { "M": { "sku": s("A-1"), "qty": n("2") } } ] },
            "created": stamp, "updated": stamp,
        }));
    }
    items
}

#[test]
fn onetable_schema_imports_and_unwinds_its_items() {
    let tmp = tempfile::tempdir().unwrap();
    let export = export_of(&tmp.path().join("export"), &onetable_items());
    let (out, stderr) = import_check_unwind(tmp.path(), "onetable", &example("onetable.json"), &export);
    assert!(stderr.contains("field `profile.map`: packed into map attribute `data`"), "{stderr}");
    assert!(stderr.contains("field `name.unique`"), "{stderr}");

    assert_column(
        &out.join("account"),
        "id",
        "id",
        &[("01HZX3K9ACME", "01HZX3K9ACME"), ("01HZX3K9INITECH", "01HZX3K9INITECH")],
    );
    let user = out.join("user");
    assert_column(
        &user,
        "email",
        "account_id",
        &[
            ("ada@acme.test", "01HZX3K9ACME"),
            ("Bob.Lee@acme.test", "01HZX3K9ACME"),
            ("peter@initech.test", "01HZX3K9INITECH"),
        ],
    );
    assert_column(
        &user,
        "email",
        "name",
        &[("ada@acme.test", "Ada"), ("Bob.Lee@acme.test", "Bob"), ("peter@initech.test", "Peter")],
    );
    let invoice = out.join("invoice");
    // `${issued}` with three millisecond digits always, `${number:6}` zero-padded.
    assert_column(
        &invoice,
        "number",
        "issued",
        &[("42", "1709294400000"), ("43", "1709294400001"), ("123456", "1577836800000")],
    );
    assert_column(
        &invoice,
        "number",
        "account_id",
        &[("42", "01HZX3K9ACME"), ("43", "01HZX3K9ACME"), ("123456", "01HZX3K9INITECH")],
    );
    let (schema, _) = read_table(&invoice);
    assert_eq!(schema.field_with_name("number").unwrap().data_type(), &DataType::Int64);
    assert_eq!(
        schema.field_with_name("issued").unwrap().data_type(),
        &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
    );
}

// ---------------------------------------------------------------------------------------------
// dynamodb-toolbox v2: `savedAs` keys with `prefix` transformers (`USER` + `#`), `_et`, and
// `_ct`/`_md` written with `toISOString()`.
// ---------------------------------------------------------------------------------------------

fn toolbox_items() -> Vec<Json> {
    let prefix = |p: &str, v: &str| format!("{p}#{v}");
    let ct = s(&to_iso_string(1_717_000_000_000));
    let mut items = Vec::new();
    for (id, email, name) in [("c-1", "ada@shop.test", "Ada"), ("C-2", "bob@shop.test", "Bob")] {
        items.push(json!({
            "pk": s(&prefix("CUSTOMER", id)), "sk": s("PROFILE"), "_et": s("Customer"),
            "em": s(email), "name": s(name), "tags": { "SS": ["vip"] }, "_ct": ct, "_md": ct,
        }));
    }
    for (customer, order, status, total) in
        [("c-1", "o-1", "shipped", "12.5"), ("c-1", "o-2", "pending", "3"), ("C-2", "o-3", "delivered", "7")]
    {
        items.push(json!({
            "pk": s(&prefix("CUSTOMER", customer)), "sk": s(&prefix("ORDER", order)), "_et": s("Order"),
            "status": s(status), "total": n(total), "gsi1pk": s(&prefix("STATUS", status)),
            "items": { "L": [ { "M": { "sku": s("A-1"), "qty": n("1") } } ] }, "_ct": ct, "_md": ct,
        }));
    }
    items
}

#[test]
fn toolbox_entities_import_and_unwind_their_items() {
    let tmp = tempfile::tempdir().unwrap();
    let export = export_of(&tmp.path().join("export"), &toolbox_items());
    let (out, stderr) = import_check_unwind(tmp.path(), "toolbox", &example("toolbox.json"), &export);
    assert!(stderr.contains("entity `Order`, field `schema.attributes.gsi1pk.putLink`"), "{stderr}");

    assert_column(&out.join("customer"), "customer_id", "email", &[("c-1", "ada@shop.test"), ("C-2", "bob@shop.test")]);
    let order = out.join("order");
    assert_column(&order, "order_id", "customer_id", &[("o-1", "c-1"), ("o-2", "c-1"), ("o-3", "C-2")]);
    assert_column(
        &order,
        "order_id",
        "created",
        &[("o-1", "1717000000000000"), ("o-2", "1717000000000000"), ("o-3", "1717000000000000")],
    );
}

// ---------------------------------------------------------------------------------------------
// NoSQL Workbench: facets with key aliases and sample items; more items of the same shapes.
// ---------------------------------------------------------------------------------------------

fn workbench_items() -> Vec<Json> {
    let mut items = Vec::new();
    for i in 0..20 {
        let id = format!("c-{}", 2000 + i);
        items.push(json!({ "PK": s(&format!("CUSTOMER#{id}")), "SK": s("PROFILE"), "customerId": s(&id),
            "name": s(&format!("Customer {i}")), "email": s(&format!("c{i}@example.com")), "since": n(&(1_700_000_000 + i).to_string()) }));
        let (oid, day, status) =
            (format!("o-{}", 6000 + i), format!("2024-04-{:02}", 1 + i), ["shipped", "pending"][i % 2]);
        items.push(json!({ "PK": s(&format!("CUSTOMER#{id}")), "SK": s(&format!("ORDER#{day}#{oid}")),
            "GSI1PK": s(&format!("STATUS#{status}")), "GSI1SK": s(&format!("{day}#{oid}")),
            "customerId": s(&id), "orderId": s(&oid), "status": s(status), "total": n("10.5"),
            "items": { "L": [ { "M": { "sku": s("SKU-1"), "qty": n("1") } } ] } }));
    }
    items
}

#[test]
fn workbench_model_imports_and_unwinds_its_items() {
    let tmp = tempfile::tempdir().unwrap();
    let export = export_of(&tmp.path().join("export"), &workbench_items());
    let (out, _) = import_check_unwind(tmp.path(), "workbench", &example("workbench.json"), &export);
    let customer = out.join("customer");
    assert_eq!(count_rows(&customer), 20);
    assert_column(
        &customer,
        "customer_id",
        "email",
        &(0..20)
            .map(|i| (format!("c-{}", 2000 + i), format!("c{i}@example.com")))
            .collect::<Vec<_>>()
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect::<Vec<_>>(),
    );
    let order = out.join("order");
    assert_eq!(count_rows(&order), 20);
    let want: Vec<(String, String)> = (0..20).map(|i| (format!("o-{}", 6000 + i), format!("c-{}", 2000 + i))).collect();
    assert_column(
        &order,
        "order_id",
        "customer_id",
        &want.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect::<Vec<_>>(),
    );
}

// ---------------------------------------------------------------------------------------------
// Broken models
// ---------------------------------------------------------------------------------------------

fn import_errors(from: &str, name: &str, model: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(name);
    std::fs::write(&path, model).unwrap();
    let r = etl(["mapping", "import", "--from", from, path.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.is_empty());
    r.stderr.replace(&tmp.path().display().to_string(), "[TMP]")
}

#[test]
fn broken_models_name_file_entity_and_field() {
    insta::assert_snapshot!(
        "electrodb_broken",
        import_errors(
            "electrodb",
            "service.json",
            r#"{
  "user": {
    "model": { "entity": "user", "version": "1", "service": "shop" },
    "attributes": { "email": { "type": "string" } },
    "indexes": { "primary": { "pk": { "field": "pk", "composite": ["emial"] }, "sk": { "field": "sk", "composite": [], "casing": "camel" } } }
  }
}"#
        )
    );
    insta::assert_snapshot!(
        "onetable_broken",
        import_errors(
            "onetable",
            "schema.json",
            r#"{ "indexes": { "primary": { "hash": "pk", "sort": "sk" } }, "params": {},
  "models": { "User": { "pk": { "type": "string", "value": "user#${mail}" }, "sk": { "value": "user#${id:x}" }, "id": { "type": "string" } } } }"#
        )
    );
    insta::assert_snapshot!(
        "toolbox_broken",
        import_errors(
            "toolbox",
            "entities.json",
            r#"[ { "name": "User", "attributes": { "id": { "partitionKey": true }, "status": ["sk", 0] } } ]"#
        )
    );
    insta::assert_snapshot!(
        "workbench_broken",
        import_errors("workbench", "model.json", r#"{ "DataModel": [ { "TableName": "A" }, { "TableName": "B" } ] }"#)
    );
    insta::assert_snapshot!("not_json", import_errors("workbench", "model.json", "{ \"DataModel\": [ }"));
}
