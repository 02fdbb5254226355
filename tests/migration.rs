//! Live bin migration between the workers of a running pipeline: a keyed
//! window count over a fixed generated input, with migrations triggered
//! while records flow, gives exactly the output of the run without them
//! (nothing lost, nothing applied twice), for every strategy, and when
//! the records held for moving bins spill to disk.

use std::time::Duration;

use eddy::daemon::migration_api::{CountSpec, Move, Target, keyed_count};

fn spec() -> CountSpec {
    CountSpec {
        events: 2_400_000,
        workers: 3,
        bins: 256,
        keys: 5_000,
        // About 4 s of input: the migrations happen while it flows.
        rate: 600_000,
        window: "100ms".into(),
        probe: false,
        keep_rows: true,
        stop_after_moves: false,
        hold: None,
    }
}

#[test]
fn migrations_while_records_flow_change_nothing_in_the_output() {
    let reference = keyed_count(&spec(), &[]).expect("reference run");
    assert!(!reference.rows.is_empty());
    let total: i64 = reference.rows.iter().map(|r| r.2).sum();
    assert_eq!(total, 2_400_000, "the reference counts every event once");
    let data = tempfile::tempdir().expect("tempdir");
    let spilling = Some((0, data.path().to_path_buf()));
    for (strategy, hold) in [
        ("all_at_once", None),
        ("fluid", None),
        ("batched", None),
        // Every held batch goes to disk and comes back.
        ("batched", spilling),
    ] {
        let spec = CountSpec { hold, ..spec() };
        // Everything onto worker 0, then spread over all three again.
        let moves = [
            Move {
                pause: Duration::from_millis(300),
                target: Target::Over(vec![0]),
                strategy: strategy.into(),
            },
            Move {
                pause: Duration::from_millis(100),
                target: Target::Even,
                strategy: strategy.into(),
            },
        ];
        let run = keyed_count(&spec, &moves).unwrap_or_else(|e| panic!("{strategy}: {e}"));
        assert_eq!(run.moves.len(), 2, "{strategy}: both migrations ran");
        for m in &run.moves {
            assert!(m.bins > 0, "{strategy}: bins moved: {m:?}");
            assert!(
                m.started + m.duration < Duration::from_secs_f64(run.seconds),
                "{strategy}: the migration ended before the input: {m:?}, run {} s",
                run.seconds
            );
        }
        if run.rows != reference.rows {
            let extra: Vec<_> = run
                .rows
                .iter()
                .filter(|r| reference.rows.binary_search(r).is_err())
                .take(5)
                .collect();
            let missing: Vec<_> = reference
                .rows
                .iter()
                .filter(|r| run.rows.binary_search(r).is_err())
                .take(5)
                .collect();
            panic!(
                "{strategy}: {} rows, {} expected; extra {extra:?}; missing {missing:?}",
                run.rows.len(),
                reference.rows.len()
            );
        }
        assert!(run.rows == reference.rows, "{strategy}: the results differ");
        match &spec.hold {
            Some((_, dir)) => {
                assert!(run.spilled_rows > 0, "{strategy}: nothing spilled");
                let left = std::fs::read_dir(dir.join("held")).expect("the spill dir");
                assert_eq!(left.count(), 0, "the spill stores went with the run");
            }
            None => assert_eq!(run.spilled_rows, 0, "{strategy}: spilled within 64 MiB"),
        }
    }
}
