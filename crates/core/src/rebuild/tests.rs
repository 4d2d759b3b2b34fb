//! What needs a rebuild, the plan the `rebuild` prop makes, the scripts it renders and how their
//! output (as ClickHouse 18.16 prints it) is read.

use super::*;
use crate::config::RebuildVerify;

fn diff(clause: &str, declared: &str, live: &str) -> DifferenceReport {
    DifferenceReport {
        clause: clause.into(),
        declared: declared.into(),
        live: live.into(),
    }
}

fn table(column: &str) -> RebuildTable {
    RebuildTable {
        cutover_column: column.into(),
        keep_old: true,
        verify: RebuildVerify::Count,
        cutover_delay_seconds: 10,
    }
}

fn statements(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

const EVENTS: &str = "CREATE TABLE IF NOT EXISTS shop.events ON CLUSTER c (id UInt64, kind String, at DateTime('UTC') \
                      DEFAULT now(), day Date, n Nullable(UInt8)) ENGINE = ReplicatedMergeTree('/t/{shard}/events_v2', \
                      '{replica}') PARTITION BY toYYYYMMDD(at) ORDER BY (kind, id)";

fn events_plan(column: &str) -> Result<RebuildPlan, Vec<PlanIssue>> {
    RebuildPlan::new(
        "shop.events",
        &table(column),
        &statements(&["CREATE DATABASE shop", EVENTS]),
        "default",
    )
}

#[test]
fn keys_engines_and_sampling_need_a_rebuild_columns_ttl_and_settings_do_not() {
    for clause in ["ORDER BY", "PARTITION BY", "PRIMARY KEY", "SAMPLE BY", "ENGINE"] {
        assert_eq!(rebuild_clauses(&[diff(clause, "a", "b")], None), vec![clause]);
    }
    for clause in ["column extra", "column order", "TTL", "SETTINGS", "COMMENT", "AS"] {
        assert!(
            rebuild_clauses(&[diff(clause, "a", "b")], None).is_empty(),
            "{clause}"
        );
    }
}

#[test]
fn an_order_by_that_appends_columns_the_live_table_lacks_is_an_alter() {
    let added = diff("column extra", "extra String", "");
    assert!(rebuild_clauses(&[diff("ORDER BY", "(id, extra)", "id"), added.clone()], None).is_empty());
    assert!(
        rebuild_clauses(
            &[diff("ORDER BY", "tuple(id, `extra`)", "(id)"), added.clone()],
            None
        )
        .is_empty()
    );
    // Appending a column the table already has, reordering, or dropping a key column is not.
    assert_eq!(
        rebuild_clauses(&[diff("ORDER BY", "(id, kind)", "id"), added.clone()], None),
        vec!["ORDER BY"]
    );
    assert_eq!(
        rebuild_clauses(&[diff("ORDER BY", "(extra, id)", "id"), added], None),
        vec!["ORDER BY"]
    );
    assert_eq!(
        rebuild_clauses(&[diff("ORDER BY", "id", "(id, kind)")], None),
        vec!["ORDER BY"]
    );
    // `(a) + (b)` is one expression, not a parenthesized list.
    assert_eq!(key_items("(a) + (b)"), vec!["(a)+(b)"]);
}

#[test]
fn the_primary_key_a_converged_order_by_leaves_is_no_rebuild_reason() {
    // Review C12: after `ADD COLUMN k, MODIFY ORDER BY (id, k)` the server keeps `id` as the
    // primary key, and the declaration names none; the rows are sorted as declared.
    let left = diff("PRIMARY KEY", "", "id");
    assert!(rebuild_clauses(std::slice::from_ref(&left), Some("(id, k)")).is_empty());
    assert!(rebuild_clauses(std::slice::from_ref(&left), Some("tuple(id, `k`)")).is_empty());
    // Before the ALTER, with the appended ORDER BY still a difference.
    let appended = [
        diff("ORDER BY", "(id, k)", "id"),
        diff("column k", "k String", ""),
        left.clone(),
    ];
    assert!(rebuild_clauses(&appended, None).is_empty());
    // A key that is not a strict prefix of the declared ORDER BY, a declared primary key, an
    // unknown ORDER BY and an ORDER BY that only a rebuild changes stay reasons.
    assert_eq!(
        rebuild_clauses(std::slice::from_ref(&left), Some("id")),
        vec!["PRIMARY KEY"]
    );
    assert_eq!(
        rebuild_clauses(std::slice::from_ref(&left), Some("(k, id)")),
        vec!["PRIMARY KEY"]
    );
    assert_eq!(
        rebuild_clauses(&[diff("PRIMARY KEY", "k", "id")], Some("(id, k)")),
        vec!["PRIMARY KEY"]
    );
    assert_eq!(
        rebuild_clauses(std::slice::from_ref(&left), None),
        vec!["PRIMARY KEY"]
    );
    assert_eq!(
        rebuild_clauses(&[diff("ORDER BY", "(k, id)", "(id, k)"), left], None),
        vec!["ORDER BY", "PRIMARY KEY"]
    );
}

#[test]
fn needs_rebuild_only_for_a_table_that_differs() {
    let object = |kind: &str, status| ObjectReport {
        name: "shop.events".into(),
        kind: kind.into(),
        statement_index: 1,
        status,
        compared: crate::live_schema::Compared::Server,
        differences: vec![diff("ORDER BY", "a", "b")],
    };
    assert!(needs_rebuild(&object("TABLE", ObjectStatus::Differs), None));
    assert!(!needs_rebuild(&object("TABLE", ObjectStatus::Missing), None));
    assert!(!needs_rebuild(
        &object("MATERIALIZED VIEW", ObjectStatus::Differs),
        None
    ));
}

#[test]
fn cut_over_columns_are_times_and_integers() {
    assert_eq!(cutover_type("DateTime"), Ok(CutoverKind::Time));
    assert_eq!(cutover_type("DateTime('UTC')"), Ok(CutoverKind::Time));
    assert_eq!(cutover_type("DateTime64(3)"), Ok(CutoverKind::Time));
    assert_eq!(cutover_type("UInt64"), Ok(CutoverKind::Number));
    assert_eq!(cutover_type("Int8"), Ok(CutoverKind::Number));
    assert!(cutover_type("Date").unwrap_err().contains("is a Date column"));
    assert!(cutover_type("String").unwrap_err().contains("has type String"));
    assert!(
        cutover_type("Nullable(UInt8)")
            .unwrap_err()
            .contains("Nullable(UInt8)")
    );
    assert!(cutover_type("Float64").is_err());
}

#[test]
fn a_plan_reads_the_declaration_and_names_what_is_wrong() {
    let plan = events_plan("at").expect("a plan");
    assert_eq!(plan.key(), "shop.events");
    assert_eq!(plan.statement_index, 1);
    assert_eq!(plan.target.len(), 16);
    assert_eq!(plan.name(NEW_SUFFIX), "`shop`.`events__new`");

    let why = |column: &str| events_plan(column).unwrap_err();
    assert_eq!(why("missing")[0].0, ".cutoverColumn");
    assert!(why("missing")[0].1.contains("names no column"));
    assert!(why("kind")[0].1.contains("has type String"));
    assert!(why("day")[0].1.contains("is a Date column"));
    assert!(why("n")[0].1.contains("Nullable(UInt8)"));

    let other = |list: &[&str]| {
        RebuildPlan::new("shop.events", &table("at"), &statements(list), "default").unwrap_err()
    };
    assert!(
        other(&["CREATE DATABASE shop"])[0]
            .1
            .contains("names no table the statements create")
    );
    assert!(
        other(&["CREATE VIEW shop.events AS SELECT 1"])[0]
            .1
            .contains("names no table")
    );
    let altered = other(&[EVENTS, "ALTER TABLE shop.events ADD COLUMN x UInt8"]);
    assert!(altered[0].1.contains("statements[1] (ALTER)"), "{altered:?}");
    let log = other(&["CREATE TABLE shop.events (at DateTime) ENGINE = Log"]);
    assert!(log[0].1.contains("ENGINE = Log"), "{log:?}");
    // An unqualified table is in client.database.
    assert!(
        RebuildPlan::new(
            "app.t",
            &table("at"),
            &statements(&["CREATE TABLE t (at DateTime) ENGINE = MergeTree ORDER BY at"]),
            "app"
        )
        .is_ok()
    );
}

#[test]
fn the_target_changes_with_the_declaration_only() {
    let a = events_plan("at").unwrap();
    let b = RebuildPlan::new("shop.events", &table("at"), &statements(&[EVENTS]), "default").unwrap();
    assert_eq!(a.target, b.target, "the statement's position is not part of it");
    let c = RebuildPlan::new(
        "shop.events",
        &table("at"),
        &statements(&[&EVENTS.replace("(kind, id)", "(id, kind)")]),
        "default",
    )
    .unwrap();
    assert_ne!(a.target, c.target);
}

#[test]
fn the_new_table_is_the_declaration_without_on_cluster_and_the_stage_is_never_replicated() {
    let script = events_plan("at").unwrap().prepare_script(Made::Recorded);
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 2, "{script}");
    assert!(
        lines[0].starts_with("CREATE TABLE IF NOT EXISTS `shop`.`events__new` (id UInt64"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("ENGINE = ReplicatedMergeTree('/t/{shard}/events_v2', '{replica}')"));
    assert!(!lines[0].contains("ON CLUSTER"));
    assert!(lines[1].starts_with("CREATE TABLE IF NOT EXISTS `shop`.`events__rebuild_stage` (id UInt64"));
    assert!(
        lines[1].contains("ENGINE = MergeTree PARTITION BY toYYYYMMDD(at) ORDER BY (kind, id)"),
        "{}",
        lines[1]
    );
    assert!(!lines[1].contains("/t/"));
}

#[test]
fn the_view_and_the_backfill_split_at_the_cut_over() {
    let plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "1764600000").unwrap();
    let columns = vec!["id".to_owned(), "at".to_owned()];
    let dual = plan.dual_write_script(&cutover, &columns, None, false);
    assert!(!dual.contains("INSERT INTO `shop`.`events__new`"), "{dual}");
    assert!(dual.contains(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS `shop`.`events__rebuild_view` TO `shop`.`events__new` AS SELECT \
         `id`, `at` FROM `shop`.`events` WHERE `at` >= toDateTime(1764600000);"
    ));
    assert!(dual.starts_with("INSERT INTO `shop`.`clickhouse_schema_rebuild_receipts`"));
    assert!(dual.contains("'cutover', '', '', 0, 0, '1764600000'"));
    // On the pod that copies for its source, the rows the table holds from the cut-over on go
    // into the new table first, only while the view does not exist yet (a rerun copies nothing).
    let copied = vec![("id".to_owned(), None), ("at".to_owned(), None)];
    let dual = plan.dual_write_script(&cutover, &columns, Some(&copied), false);
    assert!(!dual.contains("SYNC REPLICA"));
    // A replicated live table's queue is done first (rows written on the other replicas).
    let synced = plan.dual_write_script(&cutover, &columns, Some(&copied), true);
    assert!(
        synced.find("SYSTEM SYNC REPLICA `shop`.`events`;").unwrap()
            < synced.find("INSERT INTO `shop`.`events__new`").unwrap()
    );
    let ahead = dual
        .find("INSERT INTO `shop`.`events__new` (`id`, `at`)")
        .expect(&dual);
    assert!(ahead < dual.find("CREATE MATERIALIZED VIEW").unwrap());
    assert!(dual.contains("FROM `shop`.`events` WHERE 1 AND `at` >= toDateTime(1764600000) UNION ALL"));
    assert!(dual.contains(
        "WHERE (SELECT count() FROM system.tables WHERE database = 'shop' AND name = 'events__rebuild_view') = 0;"
    ));

    let partition = LivePartition {
        id: "20261101".into(),
        value: "20261101".into(),
        rows: 3,
    };
    let stage = plan.stage_script(&partition, "toYYYYMMDD(at)", &cutover, &columns);
    let lines: Vec<&str> = stage.lines().collect();
    assert_eq!(lines[0], "TRUNCATE TABLE `shop`.`events__rebuild_stage`;");
    assert_eq!(
        lines[1],
        "INSERT INTO `shop`.`events__rebuild_stage` (`id`, `at`) SELECT `id`, `at` FROM `shop`.`events` WHERE \
         (toYYYYMMDD(at)) = 20261101 AND `at` < toDateTime(1764600000);"
    );
    // An unpartitioned table is one partition.
    assert!(
        plan.stage_script(&partition, "", &cutover, &columns)
            .contains("WHERE 1 AND")
    );

    let number = Cutover::parse(CutoverKind::Number, "42").unwrap();
    assert_eq!(number.sql(), "42");
    assert!(Cutover::parse(CutoverKind::Number, "4; DROP").is_none());
    assert!(Cutover::parse(CutoverKind::Time, "").is_none());
    assert!(
        plan.cutover_query(CutoverKind::Number)
            .contains("toInt64(max(`at`)) + 1")
    );
    assert!(plan.cutover_query(CutoverKind::Time).contains("+ 10"));
}

#[test]
fn a_partition_of_the_same_partitioning_is_copied_in_one_script_with_its_receipts() {
    let plan = events_plan("at").unwrap();
    let partition = LivePartition {
        id: "20261101".into(),
        value: "20261101".into(),
        rows: 3,
    };
    let cutover = Cutover::parse(CutoverKind::Time, "9").unwrap();
    let script = plan.copy_script(
        "pod-0",
        &partition,
        "toYYYYMMDD(at)",
        &cutover,
        &["id".to_owned()],
    );
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 5, "{script}");
    assert_eq!(lines[0], "TRUNCATE TABLE `shop`.`events__rebuild_stage`;");
    assert!(lines[1].ends_with("WHERE (toYYYYMMDD(at)) = 20261101 AND `at` < toDateTime(9);"));
    assert_eq!(
        lines[2],
        "ALTER TABLE `shop`.`events__new` ATTACH PARTITION ID '20261101' FROM `shop`.`events__rebuild_stage`;"
    );
    assert!(lines[3].contains("ARRAY JOIN ['attached', 'copied'] AS s;"));
    assert!(lines[3].contains("'pod-0', '20261101', n, 0, if(s = 'attached', '20261101', '')"));
    assert_eq!(
        lines[4],
        "SELECT '20261101', count() FROM `shop`.`events__rebuild_stage` FORMAT TSV;"
    );
}

#[test]
fn attaching_skips_what_receipts_record_and_writes_a_receipt_after_each_move() {
    let plan = events_plan("at").unwrap();
    let partition = LivePartition {
        id: "p1".into(),
        value: "1".into(),
        rows: 5,
    };
    let staged = vec![("a".to_owned(), 2), ("b".to_owned(), 3)];
    let done: BTreeSet<String> = ["a".to_owned()].into();
    let cutover = Cutover::parse(CutoverKind::Time, "9").unwrap();
    let script = plan.attach_script("pod-0", &cutover, &partition, &staged, &done);
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 3, "{script}");
    assert_eq!(
        lines[0],
        "ALTER TABLE `shop`.`events__new` ATTACH PARTITION ID 'b' FROM `shop`.`events__rebuild_stage`;"
    );
    assert!(lines[1].contains("'attached', 'pod-0', 'p1', 3, 0, 'b', '9');"));
    assert!(lines[2].contains("'copied', 'pod-0', 'p1', 5, 0, '', '9');"));
}

#[test]
fn the_swap_drops_the_view_before_the_rename_and_keeps_or_drops_the_old_table() {
    let mut plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "1764000000").unwrap();
    let script = plan.swap_script(&cutover.value, "pod-0", false);
    let lines: Vec<&str> = script.lines().collect();
    // The swap's intent is recorded before anything changes: a script stopped after its RENAME
    // is then still found and finished by the next apply.
    assert!(
        lines[0].ends_with("'swapping', 'pod-0', '', 0, 0, '', '1764000000');"),
        "{script}"
    );
    let lines = &lines[1..];
    assert_eq!(lines[0], "DROP TABLE IF EXISTS `shop`.`events__rebuild_view`;");
    assert_eq!(lines.len(), 3, "{script}");
    // In an Atomic database the drop waits for the inserts under way through the view.
    assert!(
        plan.drop_view_script(&cutover.value, "pod-0", true)
            .ends_with("DROP TABLE IF EXISTS `shop`.`events__rebuild_view` SYNC;\n")
    );
    assert_eq!(
        lines[1],
        "RENAME TABLE `shop`.`events` TO `shop`.`events__old`, `shop`.`events__new` TO `shop`.`events`;"
    );
    // The staging table holds the snapshot the old table is compared with: it goes at the finish.
    assert!(!script.contains("events__rebuild_stage"), "{script}");
    assert!(
        plan.finish_script("1764000000", "pod-0", true)
            .contains("DROP TABLE IF EXISTS `shop`.`events__rebuild_stage`;\n")
    );
    // The old table is never dropped in the swap itself: rows that reached it after their
    // partition was verified are copied from it first.
    assert!(!script.contains("DROP TABLE IF EXISTS `shop`.`events__old`"));
    assert!(
        !plan
            .finish_script("1764000000", "pod-0", false)
            .contains("events__old")
    );
    // The receipt names the pod and the cut-over it finished.
    assert!(
        lines[2].ends_with("'swapped', 'pod-0', '', 0, 0, '', '1764000000');"),
        "{script}"
    );
    plan.config.keep_old = false;
    assert!(
        !plan
            .swap_script(&cutover.value, "pod-0", false)
            .contains("DROP TABLE IF EXISTS `shop`.`events__old`")
    );
    let finish = plan.finish_script("1764000000", "pod-0", false);
    assert!(
        finish.contains("DROP TABLE IF EXISTS `shop`.`events__old`;\n"),
        "{finish}"
    );
    assert!(
        finish.contains("'finished', 'pod-0', '', 0, 0, '', '1764000000');"),
        "{finish}"
    );
    // Rows nobody can place keep the old table, keepOld or not.
    assert!(
        !plan
            .finish_script("1764000000", "pod-0", true)
            .contains("events__old")
    );
    let abandon = plan.abandon_script(&Cutover::parse(CutoverKind::Time, "7").unwrap());
    assert!(abandon.find("events__rebuild_view").unwrap() < abandon.find("events__new").unwrap());
    assert!(abandon.contains("'abandoned', '', '', 0, 0, '7'"));
    // An abandon and the swap's finish release the `made` receipt: the names are free again, and
    // an object someone makes by them later is not taken for this tool's. The swap itself does
    // not: a swap cut short after its RENAME is found by that open receipt, and finished.
    assert!(
        !plan
            .swap_script(&cutover.value, "pod-0", false)
            .contains("'released'")
    );
    for script in [plan.finish_script("1764000000", "pod-0", false), abandon] {
        let release = script.find("'released'").expect(&script);
        assert!(release < script.find("DROP TABLE").unwrap(), "{script}");
    }
}

#[test]
fn a_fresh_prepare_records_that_it_makes_the_objects_before_it_creates_them() {
    let plan = events_plan("at").unwrap();
    let script = plan.prepare_script(Made::Fresh);
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 4, "{script}");
    // Objects an earlier version made: a receipt for them, nothing released.
    let adopt = plan.prepare_script(Made::Adopt);
    assert!(
        adopt
            .lines()
            .next()
            .unwrap()
            .ends_with("'made', toString(rand64());"),
        "{adopt}"
    );
    assert!(!adopt.contains("'released'"));
    // Receipts an interrupted run left open first, then this run's own, then the tables.
    assert!(
        lines[0].contains("'released'") && lines[0].contains("step = 'made'"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].ends_with(&format!(
            "SELECT 'shop.events', '{}', 'made', toString(rand64());",
            plan.target
        )),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with("CREATE TABLE IF NOT EXISTS `shop`.`events__new`"));
    assert!(lines[3].starts_with("CREATE TABLE IF NOT EXISTS `shop`.`events__rebuild_stage`"));
    // Discarding another declaration's objects drops the view before the table it writes into.
    // Discarding another declaration's objects drops the view before the table it writes into,
    // and releases the receipt before any drop: cut in between, the objects are left with no
    // receipt (refused on), never a receipt with no objects (that would vouch for anyone's).
    let discard = plan.discard_script();
    assert!(discard.find("events__rebuild_view").unwrap() < discard.find("events__new").unwrap());
    assert!(discard.find("'released'").unwrap() < discard.find("DROP TABLE").unwrap());
}

#[test]
fn the_inspection_reads_which_declarations_made_the_objects_and_whether_it_read_that_at_all() {
    let plan = events_plan("at").unwrap();
    // A constant first line, so that an empty answer still says the receipts were read.
    assert!(
        plan.inspect_script()
            .contains("SELECT 'made', '' FORMAT TSV;\nSELECT DISTINCT 'made', target FROM")
    );
    assert!(!plan.plan_inspect_script().contains("'made'"));
    let end = "__clickhouse_schema_rebuild_end__\n";
    let none = Inspection::parse(&format!("made\t\n{end}")).unwrap();
    assert_eq!(none.made, Some(BTreeSet::new()));
    let two = Inspection::parse(&format!("made\t\nmade\tab12\nmade\tcd34\n{end}")).unwrap();
    assert_eq!(
        two.made,
        Some(["ab12".to_owned(), "cd34".to_owned()].into_iter().collect())
    );
    assert_eq!(
        Inspection::parse(end).unwrap().made,
        None,
        "a plan's inspection reads no receipts"
    );
}

#[test]
fn counts_split_at_the_cut_over_with_or_without_checksums_and_wait_for_replication() {
    let mut plan = events_plan("at").unwrap();
    let column = |name: &str, ty: &str, converted: bool| HashedColumn {
        name: name.to_owned(),
        ty: ty.to_owned(),
        converted,
    };
    let columns = vec![column("id", "UInt64", false)];
    let cutover = Cutover::parse(CutoverKind::Time, "100").unwrap();
    let bound = Cutover::parse(CutoverKind::Time, "200").unwrap();
    let count = plan.counts_script(
        NEW_SUFFIX,
        "toYYYYMMDD(at)",
        &[],
        true,
        &cutover,
        Some(&bound),
        None,
    );
    assert!(count.starts_with("SYSTEM SYNC REPLICA `shop`.`events__new`;\n"));
    assert!(count.contains(
        "SELECT ifNull(toString((toYYYYMMDD(at))), '\\\\N') AS p, countIf(`at` < toDateTime(100)), toUInt64(0), countIf(`at` >= \
         toDateTime(100) AND `at` < toDateTime(200)), toUInt64(0) FROM `shop`.`events__new` GROUP BY p"
    ));
    // Without a bound, every row from the cut-over on.
    assert!(
        plan.counts_script("", "", &[], false, &cutover, None, None)
            .starts_with("SELECT 'tuple()' AS p, countIf(`at` < toDateTime(100)), toUInt64(0), countIf(`at` >= toDateTime(100)), toUInt64(0) FROM `shop`.`events`")
    );
    // Rows are hashed when columns are given (verification gives them under `verify:
    // 'checksum'`, the comparison after the swap always), whatever `verify` says.
    plan.config.verify = RebuildVerify::Count;
    assert!(
        plan.counts_script("", "", &[], false, &cutover, None, None)
            .contains("countIf(`at` < toDateTime(100)), toUInt64(0),")
    );
    assert!(
        plan.counts_script("", "", &columns, false, &cutover, None, None)
            .contains("sumWithOverflowIf(cityHash64(ifNull(cityHash64(`id`), 0)), `at` < toDateTime(100)), countIf(`at` >= toDateTime(100)), sumWithOverflowIf(cityHash64(ifNull(cityHash64(`id`), 0)), `at` >= toDateTime(100))")
    );
    // A converted column is converted on the live (or old) side only; a type 18.16's
    // `cityHash64` rejects (Decimal, UUID, LowCardinality, an array of Nullable) is hashed as
    // text; a NULL makes neither the row's hash nor the sum NULL.
    let mixed = vec![
        column("code", "UInt32", true),
        column("price", "Decimal(10, 2)", false),
        column("tags", "Array(String)", false),
        column("maybe", "Array(Nullable(UInt8))", false),
        column("note", "Nullable(String)", false),
        column("kind", "LowCardinality(String)", false),
    ];
    let hash = "cityHash64(ifNull(cityHash64({code}), 0), ifNull(cityHash64(toString(`price`)), 1), \
                ifNull(cityHash64(`tags`), 2), ifNull(cityHash64(toString(`maybe`)), 3), ifNull(cityHash64(`note`), 4), \
                ifNull(cityHash64(toString(`kind`)), 5))";
    for (suffix, code) in [
        ("", "CAST(`code` AS UInt32)"),
        (OLD_SUFFIX, "CAST(`code` AS UInt32)"),
        (NEW_SUFFIX, "`code`"),
        (STAGE_SUFFIX, "`code`"),
    ] {
        let script = plan.counts_script(suffix, "", &mixed, false, &cutover, None, None);
        assert!(
            script.contains(&format!(
                "sumWithOverflowIf({}, `at` < toDateTime(100))",
                hash.replace("{code}", code)
            )),
            "{suffix}: {script}"
        );
    }
    assert!(
        plan.bound_query(CutoverKind::Time)
            .contains("toUnixTimestamp(now())) - 10")
    );
    assert_eq!(
        plan.bound_query(CutoverKind::Number),
        plan.cutover_query(CutoverKind::Number)
    );
}

#[test]
fn only_engines_that_keep_every_row_copy_differences() {
    // The declaration is a ReplicatedMergeTree.
    let plan = events_plan("at").unwrap();
    assert!(plan.copies_differences("MergeTree"));
    assert!(plan.copies_differences("ReplicatedMergeTree"));
    for folding in [
        "SummingMergeTree",
        "ReplacingMergeTree",
        "CollapsingMergeTree",
        "ReplicatedAggregatingMergeTree",
    ] {
        assert!(!plan.copies_differences(folding), "{folding}");
    }
    let summing = RebuildPlan::new(
        "shop.totals",
        &table("at"),
        &statements(&[
            "CREATE TABLE shop.totals (k UInt64, at DateTime, v UInt64) ENGINE = SummingMergeTree PARTITION BY \
             toYYYYMM(at) ORDER BY (at, k)",
        ]),
        "default",
    )
    .unwrap();
    assert!(!summing.copies_differences("MergeTree"));
}

#[test]
fn a_catch_up_copies_the_difference_of_two_tables_as_multisets() {
    let plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "100").unwrap();
    let columns = vec![
        ("id".to_owned(), None),
        ("code".to_owned(), Some("UInt32".to_owned())),
    ];
    let script = plan.catch_up_script(
        "",
        NEW_SUFFIX,
        "(2026,'a')",
        "(toYYYYMM(at), kind)",
        &plan.before(&cutover),
        &columns,
        false,
        false,
        None,
    );
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 3, "{script}");
    // The rows it copies are counted first, with the same difference.
    assert!(lines[0].starts_with("SELECT toString(sum(__clickhouse_schema_n)) FROM (SELECT "));
    assert_eq!(lines[1], "SET insert_deduplicate = 0;");
    let insert = lines[2];
    assert!(insert.starts_with(
        "INSERT INTO `shop`.`events__new` (`id`, `code`) SELECT __clickhouse_schema_c0, __clickhouse_schema_c1 FROM"
    ));
    // The live side converted to the new table's types, both sides filtered alike, the new
    // table's rows subtracted, and each missing row copied as often as it is missing.
    assert!(insert.contains(
        "SELECT `id` AS __clickhouse_schema_c0, CAST(`code` AS UInt32) AS __clickhouse_schema_c1, toInt64(1) AS \
         __clickhouse_schema_side FROM `shop`.`events` WHERE ifNull(toString(((toYYYYMM(at), kind))), '\\\\N') = '(2026,\\'a\\')' AND \
         `at` < toDateTime(100) UNION ALL SELECT `id` AS __clickhouse_schema_c0, `code` AS __clickhouse_schema_c1, \
         toInt64(-1) AS __clickhouse_schema_side FROM `shop`.`events__new` WHERE"
    ), "{insert}");
    assert!(
        insert
            .contains("HAVING __clickhouse_schema_n > 0) ARRAY JOIN range(toUInt64(__clickhouse_schema_n))")
    );
    assert!(insert.ends_with("AS __clickhouse_schema_i;"));
    // After the swap: from the old table into the live one.
    let after = plan.catch_up_script(
        OLD_SUFFIX,
        "",
        "",
        "",
        &plan.before(&cutover),
        &columns,
        false,
        true,
        None,
    );
    assert!(after.contains("INSERT INTO `shop`.`events` (`id`, `code`)"));
    // Into a Replicated table written on other replicas too: their rows fetched first.
    assert!(after.starts_with("SYSTEM SYNC REPLICA `shop`.`events`;\n"));
    assert!(after.contains("FROM `shop`.`events__old` WHERE 1 AND"));
}

#[test]
fn the_inspection_reads_what_18_16_prints() {
    let out = "table\tevents\tMergeTree\ttoYYYYMMDD(at)\n\
               table\tevents__new\tReplicatedMergeTree\ttoYYYYMMDD(at)\n\
               replica\tevents__new\t/t/0/events_v2\n\
               column\tevents\tid\tUInt64\t\n\
               column\tevents\tat\tDateTime\t\n\
               column\tevents\tgone\tString\t\n\
               column\tevents__new\tid\tUInt64\t\n\
               column\tevents__new\tat\tDateTime\tDEFAULT\n\
               column\tevents__new\tday\tDate\tMATERIALIZED\n\
               create\tCREATE TABLE shop.events (id UInt64) ENGINE = MergeTree ORDER BY id\n\
               object\tshop\tmv\tCREATE MATERIALIZED VIEW shop.mv TO shop.t AS SELECT id FROM shop.events\n\
               object\tother\tdist\tCREATE TABLE other.dist (id UInt64) ENGINE = Distributed(c, \\'shop\\', \\'events\\')\n\
               object\tshop\tunrelated\tCREATE TABLE shop.unrelated (events_id UInt64) ENGINE = Log\n\
               object\tshop\tbare\tCREATE VIEW shop.bare AS SELECT * FROM events\n\
               object\tother\tsame_name\tCREATE VIEW other.same_name AS SELECT * FROM events\n\
               object\tother\tmerged\tCREATE TABLE other.merged (id UInt64) ENGINE = Merge(\'shop\', \'^events\')\n\
               object\tshop\tmerged_here\tCREATE TABLE shop.merged_here (id UInt64) ENGINE = Merge(currentDatabase(), \'events|audit\')\n\
               object\tother\tmerged_elsewhere\tCREATE TABLE other.merged_elsewhere (id UInt64) ENGINE = Merge(currentDatabase(), \'^events\')\n\
               dictionary\td\tClickHouse: shop.events\n\
               database\tOrdinary\n\
               receipt\tcopied\tpod-0\t20261101\t50\t0\t\t1764600000\n\
               receipt\tcutover\t\t\t0\t0\t1764600000\t1764600000\n\
               receipt\tcopied\tpod-0\t20261102\t50\t0\t\t1764500000\n\
               __clickhouse_schema_rebuild_end__\n";
    let inspection = Inspection::parse(out).expect("readable");
    assert_eq!(inspection.tables.len(), 2);
    // 18.16's database drops under a lock; an Atomic one (20.10 on) returns first.
    assert!(!inspection.drops_lazily());
    let atomic = Inspection::parse("database\tAtomic\n__clickhouse_schema_rebuild_end__\n").unwrap();
    assert!(atomic.drops_lazily());
    assert_eq!(inspection.replicas["events__new"], "/t/0/events_v2");
    assert_eq!(inspection.receipts.len(), 3);
    assert_eq!(inspection.receipts[0].rows, 50);
    assert_eq!(inspection.receipts[1].value, "1764600000");
    // A copy made up to another (an abandoned) cut-over is not this run's.
    let cutover = Cutover::parse(CutoverKind::Time, "1764600000").unwrap();
    let ours: Vec<&str> = of_cutover(&inspection.receipts, &cutover)
        .filter(|r| r.step == "copied")
        .map(|r| r.partition.as_str())
        .collect();
    assert_eq!(ours, vec!["20261101"]);
    // Shared, insertable columns in the new table's order; a MATERIALIZED one is computed.
    assert_eq!(shared_columns(&inspection, "events"), vec!["id", "at"]);
    let names = |columns: Vec<HashedColumn>| -> Vec<(String, String, bool)> {
        columns.into_iter().map(|c| (c.name, c.ty, c.converted)).collect()
    };
    assert_eq!(
        names(checksum_columns(&inspection, "events")),
        vec![
            ("id".to_owned(), "UInt64".to_owned(), false),
            ("at".to_owned(), "DateTime".to_owned(), false)
        ]
    );
    let retyped = Inspection::parse(
        "column\tt\tid\tUInt64\t\ncolumn\tt\tcode\tString\t\ncolumn\tt__new\tid\tUInt64\t\ncolumn\tt__new\tcode\tUInt32\t\n\
         __clickhouse_schema_rebuild_end__\n",
    )
    .unwrap();
    assert_eq!(shared_columns(&retyped, "t"), vec!["id", "code"]);
    assert_eq!(
        names(checksum_columns(&retyped, "t")),
        vec![
            ("id".to_owned(), "UInt64".to_owned(), false),
            ("code".to_owned(), "UInt32".to_owned(), true)
        ],
        "a converted column is hashed as converted"
    );

    let plan = events_plan("at").unwrap();
    let none = BTreeSet::new();
    assert_eq!(
        dependents(&plan, &inspection, &none),
        vec![
            "shop.mv",
            "other.dist",
            "shop.bare",
            "other.merged",
            "shop.merged_here",
            "dictionary d"
        ],
        "a Merge table whose pattern may match the table (other.merged_elsewhere reads other's)"
    );
    let declared: BTreeSet<String> = ["shop.mv".to_owned(), "shop.bare".to_owned()].into();
    assert_eq!(
        dependents(&plan, &inspection, &declared),
        vec!["other.dist", "other.merged", "shop.merged_here", "dictionary d"]
    );

    assert!(
        Inspection::parse(&ended("surprise\n"))
            .unwrap_err()
            .contains("an unexpected line")
    );
    assert!(Inspection::parse(&ended("receipt\tcopied\tp\tx\tmany\t0\t\t1\n")).is_err());
    // Cut before the end marker (the transport keeps 1 MiB): an error, not a shorter list.
    let cut = &out[..out.find("dictionary").unwrap()];
    assert!(
        Inspection::parse(cut)
            .unwrap_err()
            .contains("ended before its end marker"),
    );
}

/// `lines` as a script prints them, its end marker last.
fn ended(lines: &str) -> String {
    format!("{lines}__clickhouse_schema_rebuild_end__\n")
}

#[test]
fn every_read_script_prints_the_end_marker_last() {
    let plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "1764600000").unwrap();
    let partition = LivePartition {
        id: "20261101".into(),
        value: "20261101".into(),
        rows: 5,
    };
    let marker = "SELECT '__clickhouse_schema_rebuild_end__' FORMAT TSV;\n";
    for script in [
        plan.inspect_script(),
        plan.plan_inspect_script(),
        plan.partitions_query("toYYYYMMDD(at)"),
        plan.partitions_query(""),
        plan.stage_script(&partition, "toYYYYMMDD(at)", &cutover, &["id".to_owned()]),
        plan.counts_script("", "toYYYYMMDD(at)", &[], true, &cutover, None, None),
    ] {
        assert!(script.ends_with(marker), "{script}");
    }
}

#[test]
fn partitions_staged_parts_and_counts_are_read_and_compared() {
    let partitions = parse_partitions(&ended(
        "20261101\t20261101\t50\nall\ttuple()\t3\nx\t(1,\\'a\\')\t2\n",
    ))
    .unwrap();
    assert_eq!(partitions[1].value, "tuple()");
    assert_eq!(partitions[2].value, "(1,'a')");
    assert!(parse_partitions(&ended("a\tb\n")).is_err());
    // A list cut short, even at a line's end, is not a shorter list; nor is a line cut mid-way
    // ("50" read as "5") a smaller count.
    assert!(parse_partitions("20261101\t20261101\t50\n").is_err());
    assert!(parse_counts("20261101\t5").is_err());
    assert_eq!(
        parse_staged(&ended("a\t2\nb\t3\n")).unwrap(),
        vec![("a".into(), 2), ("b".into(), 3)]
    );
    assert!(parse_staged(&ended("a\n")).is_err());
    assert!(parse_staged("a\t2\n").is_err());
    // A copy batch has no marker: it is read for what it finished.
    assert_eq!(parse_copied("a\t2\n").unwrap(), vec![("a".into(), 2)]);

    let one = parse_counts(&ended(
        "20261101\t50\t18446744073709551615\t7\t1\n20261102\t1\t0\t0\t0\n",
    ))
    .unwrap();
    let two = parse_counts(&ended("20261101\t5\t2\t0\t0\n")).unwrap();
    // A range without rows is no partition of it.
    assert_eq!(one.after.keys().collect::<Vec<_>>(), vec!["20261101"]);
    let mut sum = Counts::new();
    add_counts(&mut sum, &one.before);
    add_counts(&mut sum, &two.before);
    assert_eq!(
        sum["20261101"],
        (55, 1),
        "checksums wrap around like sumWithOverflow"
    );
    let found = parse_counts(&ended("20261101\t55\t1\t0\t0\n20261103\t4\t0\t0\t0\n")).unwrap();
    assert_eq!(
        count_differences(&sum, &found.before),
        vec![
            ("20261102".to_owned(), (1, 0), (0, 0)),
            ("20261103".to_owned(), (0, 0), (4, 0))
        ]
    );
    assert!(parse_counts(&ended("p\tx\t0\t0\t0\n")).is_err());
    assert!(
        parse_counts(&ended("p\t1\t0\n")).is_err(),
        "the format before the split"
    );
    assert_eq!(
        parse_counts(&ended("(1,\\'a\\')\t1\t0\t0\t0\n"))
            .unwrap()
            .before
            .keys()
            .next()
            .unwrap(),
        "(1,'a')"
    );
    // Nothing at all but the marker: no partition.
    assert_eq!(parse_counts(&ended("")).unwrap(), SplitCounts::default());
}

#[test]
fn an_integer_cut_over_is_new_but_not_above_every_used_one() {
    let used: BTreeSet<i128> = [301, 302, 1_000_000_001].into();
    // An abandoned attempt took the live rows' next value: the one after it.
    assert_eq!(unused_from(301, &used), 303);
    // A finished attempt far above (ids restarted, a table made again): just above the live rows,
    // so the view carries every row written from now on.
    assert_eq!(unused_from(400, &used), 400);
    assert_eq!(unused_from(1_000_000_001, &used), 1_000_000_002);
}

#[test]
fn the_leftovers_query_is_read_only_when_complete() {
    let plan = events_plan("at").unwrap();
    assert!(
        plan.leftovers_query()
            .contains("database = 'shop' AND name IN ('events__old', 'events__new')")
    );
    let end = "__clickhouse_schema_rebuild_end__\n";
    assert_eq!(
        parse_leftovers(&format!("left\tevents__old\n{end}")),
        Ok(["events__old".to_owned()].into_iter().collect())
    );
    assert_eq!(parse_leftovers(end), Ok(BTreeSet::new()));
    assert!(
        parse_leftovers("left\tevents__old\n").is_err(),
        "no end marker: cut short"
    );
    assert!(parse_leftovers(&format!("Code: 60\n{end}")).is_err());
}

#[test]
fn open_swaps_and_old_partitions_are_read_whole_or_not_at_all() {
    let plan = events_plan("at").unwrap();
    let swaps = plan.open_swaps_query("pod-0");
    assert!(
        swaps.contains("step IN ('swapping', 'swapped') AND source = 'pod-0'"),
        "{swaps}"
    );
    assert!(
        swaps.contains("step = 'finished' AND source = 'pod-0'"),
        "{swaps}"
    );
    assert!(plan.old_partitions_query("toYYYYMMDD(at)").starts_with(
        "SELECT DISTINCT 'p', ifNull(toString((toYYYYMMDD(at))), '\\\\N') FROM `shop`.`events__old`"
    ));
    assert!(
        plan.old_partitions_query("")
            .starts_with("SELECT DISTINCT 'p', '' FROM")
    );
    let end = "__clickhouse_schema_rebuild_end__\n";
    assert_eq!(
        parse_tagged(&format!("p\t20261101\np\t20261102\n{end}"), "p"),
        Ok(vec!["20261101".to_owned(), "20261102".to_owned()])
    );
    assert_eq!(parse_tagged(end, "swap"), Ok(vec![]));
    assert!(parse_tagged("p\t20261101\n", "p").is_err(), "cut short");
    assert!(parse_tagged(&format!("swap\t1\n{end}"), "p").is_err());
}

#[test]
fn the_backfill_of_a_replicated_source_lists_its_partitions_after_its_replication_queue() {
    let plan = events_plan("at").unwrap();
    let synced = plan.backfill_partitions_script("toYYYYMMDD(at)", true);
    assert!(
        synced.starts_with("SYSTEM SYNC REPLICA `shop`.`events`;\nSELECT partition_id"),
        "{synced}"
    );
    assert_eq!(
        plan.backfill_partitions_script("toYYYYMMDD(at)", false),
        plan.partitions_query("toYYYYMMDD(at)")
    );
}

#[test]
fn row_differences_are_listed_whole_and_only_those_both_reads_share_count() {
    let plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "1764000000").unwrap();
    let bound = Cutover::parse(CutoverKind::Time, "1764000600").unwrap();
    let columns = vec![
        ("id".to_owned(), None),
        ("at".to_owned(), Some("DateTime".to_owned())),
    ];
    let script = plan.row_differences_script(&columns, &cutover, Some(&bound), true, false);
    // The live table's queue only (the new one is not Replicated here), then the rows that differ
    // in the view's range, live values converted.
    assert!(
        script.starts_with("SYSTEM SYNC REPLICA `shop`.`events`;\nSELECT 'd', "),
        "{script}"
    );
    assert!(
        !script.contains("SYSTEM SYNC REPLICA `shop`.`events__new`"),
        "{script}"
    );
    // Each column hashed by itself, so that a NULL does not make the row's hash NULL; as text,
    // which `cityHash64` takes of any type on every server.
    assert!(
        script.contains(
            "cityHash64(ifNull(cityHash64(toString(__clickhouse_schema_c0)), 0), \
             ifNull(cityHash64(toString(__clickhouse_schema_c1)), 1))"
        ),
        "{script}"
    );
    assert!(
        script.contains("CAST(`at` AS DateTime) AS __clickhouse_schema_c1"),
        "{script}"
    );
    assert!(
        script.contains("`at` >= toDateTime(1764000000) AND `at` < toDateTime(1764000600)"),
        "{script}"
    );
    // The rows held too often first, and one more than are shown.
    assert!(
        script.contains(
            "WHERE __clickhouse_schema_n != 0 ORDER BY __clickhouse_schema_n, __clickhouse_schema_h LIMIT 10001"
        ),
        "{script}"
    );
    let end = "__clickhouse_schema_rebuild_end__\n";
    assert!(script.ends_with(&format!("SELECT '{}' FORMAT TSV;\n", end.trim_end())));
    // No bound: every row from the cut-over on.
    let open = plan.row_differences_script(&columns, &cutover, None, false, true);
    assert!(
        open.starts_with("SYSTEM SYNC REPLICA `shop`.`events__new`;\n"),
        "{open}"
    );
    assert!(!open.contains("`at` < "), "{open}");

    let first = parse_row_differences(&format!("d\t12:-2\nd\t11:1\nd\t13:1\nd\t14:2\n{end}")).unwrap();
    assert_eq!(first.rows, BTreeMap::from([(11, 1), (12, -2), (13, 1), (14, 2)]));
    assert!(!first.cut);
    let second = parse_row_differences(&format!("d\t12:-1\nd\t13:-1\nd\t14:3\nd\t15:1\n{end}")).unwrap();
    // 11 and 15 differ in one read only (an insert under way), 13 changed sides; 12 and 14 last,
    // as often as in the read where they differ less.
    assert_eq!(
        lasting_differences(&first.rows, &second.rows),
        BTreeMap::from([(12, -1), (14, 2)])
    );
    assert_eq!(parse_row_differences(end), Ok(RowDifferences::default()));
    // One line more than are shown: the list is cut, and that line is not taken.
    let many: String = (0..=ROW_DIFFERENCES_SHOWN)
        .map(|i| format!("d\t{i}:1\n"))
        .collect();
    let cut = parse_row_differences(&format!("{many}{end}")).unwrap();
    assert!(cut.cut);
    assert_eq!(cut.rows.len(), ROW_DIFFERENCES_SHOWN);
    assert!(!cut.rows.contains_key(&(ROW_DIFFERENCES_SHOWN as u64)));
    // Rows held too rarely only (listed after those held too often): every extra was listed.
    assert!(cut.lists_every_extra());
    let extras: String = (0..=ROW_DIFFERENCES_SHOWN)
        .map(|i| format!("d\t{i}:-1\n"))
        .collect();
    assert!(
        !parse_row_differences(&format!("{extras}{end}"))
            .unwrap()
            .lists_every_extra()
    );
    assert!(first.lists_every_extra());
    assert!(
        parse_row_differences("d\t11:1\n").is_err(),
        "no end marker: cut short"
    );
    assert!(parse_row_differences(&format!("d\t11\n{end}")).is_err());
    assert!(parse_row_differences(&format!("d\tx:1\n{end}")).is_err());
}

#[test]
fn a_finish_records_the_swap_and_an_abandoned_attempt_has_no_open_swap() {
    let plan = events_plan("at").unwrap();
    // A finish says the RENAME happened (`swapped`) as well as that the swap ended: a script
    // stopped after its RENAME wrote only `swapping`.
    let finish = plan.finish_script("1764000000", "pod-0", false);
    let swapped = finish
        .find("'swapped', 'pod-0', '', 0, 0, '', '1764000000');")
        .expect(&finish);
    let finished = finish
        .find("'finished', 'pod-0', '', 0, 0, '', '1764000000');")
        .expect(&finish);
    assert!(swapped < finished, "{finish}");
    // A swap begun by an attempt later abandoned stopped before its RENAME: not open.
    let swaps = plan.open_swaps_query("pod-0");
    assert!(
        swaps.contains("AND cutover NOT IN (SELECT value FROM `shop`.`clickhouse_schema_rebuild_receipts` WHERE table_name = 'shop.events' AND step = 'abandoned')"),
        "{swaps}"
    );
}

#[test]
fn after_the_swap_the_old_table_is_compared_with_a_snapshot_of_the_new_one() {
    let plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "100").unwrap();
    // The snapshot: the staging table emptied and its merges stopped, then each partition of
    // the new table by hard links, both tables' rows, then its receipt.
    let snapshot = plan.snapshot_script(&["202611".to_owned(), "2026'12".to_owned()], "100", "pod-0");
    let lines: Vec<&str> = snapshot.lines().collect();
    assert_eq!(lines.len(), 8, "{snapshot}");
    assert_eq!(lines[0], "TRUNCATE TABLE `shop`.`events__rebuild_stage`;");
    assert_eq!(lines[1], "SYSTEM STOP MERGES `shop`.`events__rebuild_stage`;");
    assert_eq!(
        lines[2],
        "ALTER TABLE `shop`.`events__rebuild_stage` REPLACE PARTITION ID '202611' FROM `shop`.`events__new`;"
    );
    assert_eq!(
        lines[3],
        "ALTER TABLE `shop`.`events__rebuild_stage` REPLACE PARTITION ID '2026\\'12' FROM `shop`.`events__new`;"
    );
    assert_eq!(
        &lines[4..6],
        [
            "SELECT 'n', toString(count()) FROM `shop`.`events__rebuild_stage` FORMAT TSV;",
            "SELECT 'n', toString(count()) FROM `shop`.`events__new` FORMAT TSV;"
        ]
    );
    assert!(
        lines[6].ends_with("'snapshot', 'pod-0', '', 0, 0, '', '100');"),
        "{snapshot}"
    );
    assert!(snapshot.ends_with(&end_statement()));
    // Its partitions are read whole, after a Replicated new table's queue is done.
    let partitions = plan.snapshot_partitions_query(true);
    assert!(
        partitions
            .starts_with("SYSTEM SYNC REPLICA `shop`.`events__new`;\nSELECT DISTINCT 'p', partition_id")
    );
    assert!(partitions.ends_with(&end_statement()));
    assert!(!plan.snapshot_partitions_query(false).contains("SYNC"));

    // The copy: the old table's rows less the snapshot's, into the table.
    let columns = vec![("id".to_owned(), None)];
    let script = plan.catch_up_script(
        OLD_SUFFIX,
        "",
        "",
        "",
        &plan.before(&cutover),
        &columns,
        false,
        false,
        Some(STAGE_SUFFIX),
    );
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(lines.len(), 3, "{script}");
    assert!(
        lines[2].starts_with("INSERT INTO `shop`.`events` (`id`) SELECT"),
        "{script}"
    );
    for line in [lines[0], lines[2]] {
        assert!(
            line.contains(
                "FROM `shop`.`events__old` WHERE 1 AND `at` < toDateTime(100) UNION ALL SELECT `id` AS \
                 __clickhouse_schema_c0, toInt64(-1) AS __clickhouse_schema_side FROM `shop`.`events__rebuild_stage` \
                 WHERE 1 AND `at` < toDateTime(100))"
            ),
            "{line}"
        );
        assert!(!line.contains("FROM `shop`.`events` WHERE"), "{line}");
    }
}

#[test]
fn the_conversion_check_uses_every_converted_value() {
    let plan = events_plan("at").unwrap();
    let script = plan.convert_check_script(&[
        ("code".to_owned(), "UInt32".to_owned()),
        ("n".to_owned(), "Int8".to_owned()),
    ]);
    assert_eq!(
        script,
        "SELECT toString(count()), toString(sum(cityHash64(CAST(`code` AS UInt32), CAST(`n` AS Int8)))) FROM \
         `shop`.`events` FORMAT TSV;\n"
    );
}

#[test]
fn only_a_value_that_does_not_convert_refuses_a_rebuild() {
    use crate::rebuild::conversion_failed;
    // What 18.16 and the 26.9 engine print for a String that is not a number, and an Enum's
    // unknown element (18.16: a LOGICAL_ERROR; later: UNKNOWN_ELEMENT_OF_ENUM).
    assert!(conversion_failed(
        Some(6),
        "Cannot parse string '<data>' as UInt32"
    ));
    assert!(conversion_failed(
        Some(49),
        "Unknown element '<data>' for type Enum8('a' = 1)"
    ));
    assert!(conversion_failed(Some(691), "Unknown element '<data>' for enum"));
    assert!(conversion_failed(Some(41), "Cannot parse datetime"));
    // A limit, a timeout, memory, too many queries, a lost connection, no code at all.
    for code in [Some(158), Some(159), Some(241), Some(202), Some(210), None] {
        assert!(!conversion_failed(code, "Timeout exceeded"), "{code:?}");
    }
    // A LOGICAL_ERROR that is not an Enum's.
    assert!(!conversion_failed(Some(49), "Part is broken"));
}

#[test]
fn a_replicated_database_refuses_a_rebuild() {
    let end = "__clickhouse_schema_rebuild_end__\n";
    // The inspection's line for the table's database, as `system.databases` gives its engine.
    let replicated = Inspection::parse(&format!("database\tReplicated\n{end}")).unwrap();
    let why = replicated.database_refusal().expect("refused");
    assert!(
        why.contains("Replicated engine") && why.contains("by hand"),
        "{why}"
    );
    for engine in ["Atomic", "Ordinary", "Lazy", ""] {
        let inspection = Inspection::parse(&format!("database\t{engine}\n{end}")).unwrap();
        assert_eq!(inspection.database_refusal(), None, "{engine}");
    }
}

#[test]
fn the_stage_is_emptied_by_detaching_its_partitions_before_its_drop() {
    let plan = events_plan("at").unwrap();
    // After the swap the stage holds the whole table (hard links): a DROP or TRUNCATE of it can
    // meet the server's max_table_size_to_drop, a DETACH cannot.
    let script = plan.empty_stage_script(&["202611".to_owned(), "2026'12".to_owned()]);
    assert_eq!(
        script,
        "ALTER TABLE `shop`.`events__rebuild_stage` DETACH PARTITION ID '202611';\n\
         ALTER TABLE `shop`.`events__rebuild_stage` DETACH PARTITION ID '2026\\'12';\n"
    );
    assert_eq!(plan.empty_stage_script(&[]), "");
    let query = plan.stage_partitions_query();
    assert!(
        query.starts_with(
            "SELECT DISTINCT 'p', partition_id FROM system.parts WHERE database = 'shop' AND table = \
             'events__rebuild_stage' AND active"
        ),
        "{query}"
    );
    assert!(query.ends_with(&end_statement()));
}

#[test]
fn a_partition_is_selected_by_the_literal_the_server_quoted() {
    let plan = events_plan("at").unwrap();
    // The literal comes from the data, quoted by the server, matched to system.parts by the text
    // it prints (unquoted for a one-column key).
    let query = plan.partitions_query("toDate(at)");
    assert!(
        query.contains(
            "ANY LEFT JOIN (SELECT toString((toDate(at))) AS text, any(toString(tuple((toDate(at))))) AS lit FROM \
             `shop`.`events` GROUP BY text) AS lits USING text"
        ),
        "{query}"
    );
    assert!(!plan.partitions_query("").contains("JOIN"));
    let cutover = Cutover::parse(CutoverKind::Time, "1764600000").unwrap();
    let staged = |value: &str| {
        plan.stage_script(
            &LivePartition {
                id: "x".into(),
                value: value.into(),
                rows: 1,
            },
            "toDate(at)",
            &cutover,
            &["id".to_owned()],
        )
    };
    assert!(staged("('2026-11-01')").contains("WHERE (toDate(at)) = ('2026-11-01') AND"));
    // A Nullable key's NULL (26.x with allow_nullable_key), which `= NULL` would not match.
    for null in ["(NULL)", "ᴺᵁᴸᴸ", "\\N"] {
        assert!(staged(null).contains("WHERE isNull((toDate(at))) AND"), "{null}");
    }
}

#[test]
fn ttls_that_rewrite_rows_are_told_from_those_that_delete_them() {
    for (sql, rewrites) in [
        ("(id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id", false),
        (
            "(id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id TTL at + INTERVAL 1 DAY",
            false,
        ),
        (
            "(id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id TTL at + INTERVAL 1 DAY DELETE, at + \
             INTERVAL 2 DAY TO VOLUME 'cold' SETTINGS index_granularity = 8192",
            false,
        ),
        (
            "(id UInt64, at DateTime, note String TTL at + INTERVAL 1 DAY) ENGINE = MergeTree ORDER BY id",
            true,
        ),
        (
            "CREATE TABLE db.t (id UInt64, at DateTime, v UInt64) ENGINE = MergeTree ORDER BY (id, toDate(at)) TTL at + \
             INTERVAL 1 DAY GROUP BY id, toDate(at) SET v = sum(v)",
            true,
        ),
        (
            "(id UInt64, at DateTime, v UInt64) ENGINE = MergeTree ORDER BY id TTL at + INTERVAL 1 DAY WHERE v = 0",
            false,
        ),
        // `SET` inside SETTINGS or a projection is not a TTL's.
        (
            "(id UInt64, PROJECTION p (SELECT id ORDER BY id)) ENGINE = MergeTree ORDER BY id SETTINGS \
             min_bytes_for_wide_part = 0",
            false,
        ),
        ("(`ttl` UInt64) ENGINE = MergeTree ORDER BY tuple()", false),
    ] {
        assert_eq!(ttl_rewrites_rows(sql), rewrites, "{sql}");
    }
    let plan = events_plan("at").unwrap();
    assert!(plan.compares_rows("MergeTree", None));
    assert!(plan.compares_rows(
        "MergeTree",
        Some("CREATE TABLE shop.events (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id TTL at + toIntervalDay(1)")
    ));
    assert!(!plan.compares_rows(
        "MergeTree",
        Some("CREATE TABLE shop.events (id UInt64, at DateTime, n String TTL at + toIntervalDay(1)) ENGINE = MergeTree ORDER BY id")
    ));
    assert!(!plan.compares_rows("SummingMergeTree", None));
}

#[test]
fn the_hashes_after_the_swap_read_only_partitions_changed_since_the_dual_write_began() {
    let plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "100").unwrap();
    let changed = plan.changed_partitions_query("toYYYYMMDD(at)", &cutover);
    assert!(
        changed.starts_with(
            "SELECT DISTINCT 'p', ifNull(toString((toYYYYMMDD(at))), '\\\\N') FROM `shop`.`events__old` WHERE _part IN (SELECT name FROM \
             system.parts WHERE database = 'shop' AND table = 'events__old' AND partition_id IN (SELECT partition_id \
             FROM system.parts WHERE database = 'shop' AND table = 'events__old' AND modification_time + 5 >= (SELECT \
             min(at) FROM `shop`.`clickhouse_schema_rebuild_receipts` WHERE table_name = 'shop.events' AND step = \
             'cutover' AND cutover = '100'))) FORMAT TSV;\n"
        ),
        "{changed}"
    );
    assert!(
        plan.pending_mutations_query().starts_with(
            "SELECT 'm', toString(count()) FROM system.mutations WHERE database = 'shop' AND table = 'events__old' AND \
             NOT is_done FORMAT TSV;\n"
        )
    );
    // Without the receipt, min(at) is the epoch and every part counts; a DateTime less 5 there
    // would wrap around and count none, so the slack is added to the part's time instead.
    assert!(!changed.contains(") - 5"), "{changed}");
    assert!(changed.ends_with(&end_statement()));
    let columns = [HashedColumn {
        name: "id".to_owned(),
        ty: "UInt64".to_owned(),
        converted: false,
    }];
    let only = ["20261101".to_owned(), "b'c".to_owned()];
    let script = plan.counts_script(
        STAGE_SUFFIX,
        "toYYYYMMDD(at)",
        &columns,
        false,
        &cutover,
        None,
        Some(&only),
    );
    assert!(
        script.contains(
            "FROM `shop`.`events__rebuild_stage` WHERE ifNull(toString((toYYYYMMDD(at))), '\\\\N') IN ('20261101', 'b\\'c') GROUP BY p"
        ),
        "{script}"
    );
}

#[test]
fn the_partition_of_a_null_key_is_counted_and_copied_under_its_own_text() {
    // TSV prints the text `\N` as `\\N`; it reads back as `\N`, which the catch-up's filter
    // matches with the same expression the counts printed (a NULL's `toString` is NULL, which `=`
    // matched with nothing).
    let counts = parse_counts(&format!("\\\\N\t2\t0\t0\t0\nN\t1\t0\t0\t0\n{END}\n")).unwrap();
    assert_eq!(
        counts.before.keys().collect::<Vec<_>>(),
        vec!["N", "\\N"],
        "a NULL key and the text N stay apart"
    );
    let plan = events_plan("at").unwrap();
    let cutover = Cutover::parse(CutoverKind::Time, "100").unwrap();
    let script = plan.catch_up_script(
        "",
        NEW_SUFFIX,
        "\\N",
        "k",
        &plan.before(&cutover),
        &[("id".to_owned(), None)],
        false,
        false,
        None,
    );
    assert!(
        script.contains("WHERE ifNull(toString((k)), '\\\\N') = '\\\\N' AND"),
        "{script}"
    );
}
