//! The patched scheduler's vcore ledger (vendor/ballista-scheduler, `state::bound_vcores`):
//! after an executor is lost and a stage rolled back, the survivor gets back exactly the
//! vcores its tasks took, once each, whatever became of their stages.

use std::sync::Arc;

use ballista_core::JobId;
use ballista_core::serde::protobuf::TaskStatus;
use ballista_core::serde::scheduler::TaskKey;
use ballista_scheduler::cluster::BoundTask;
use ballista_scheduler::state::bound_vcores::BoundVcores;
use ballista_scheduler::state::execution_graph::TaskDescription;
use datafusion::arrow::datatypes::Schema;
use datafusion::execution::config::SessionConfig;
use datafusion::physical_plan::empty::EmptyExec;

/// A task of `job` bound to `executor`: stage, stage attempt, task id, vcores taken.
fn bound(
    job: &str,
    executor: &str,
    (stage, attempt, task, vcores): (usize, usize, usize, u32),
) -> BoundTask {
    let description = TaskDescription {
        session_id: "session".into(),
        key: TaskKey {
            job_id: JobId::from(job.to_string()),
            stage_id: stage,
            task_id: task,
        },
        stage_attempt_num: attempt,
        task_attempt: 0,
        global_input_partition_ids: (0..vcores as usize).collect(),
        vcores_consumed: vcores,
        plan: Arc::new(EmptyExec::new(Arc::new(Schema::empty()))),
        session_config: Arc::new(SessionConfig::new()),
    };
    (executor.to_string(), description)
}

/// The final status of a task of `job`: stage, stage attempt, task id.
fn status(job: &str, (stage, attempt, task): (u32, u32, u32)) -> TaskStatus {
    TaskStatus {
        job_id: job.into(),
        stage_id: stage,
        stage_attempt_num: attempt,
        task_id: task,
        ..Default::default()
    }
}

#[test]
fn the_survivor_gets_back_what_its_tasks_of_a_rolled_back_stage_took() {
    let ledger = BoundVcores::default();
    // Stage 1 ran on `lost`; stage 2, reading its output, on both.
    ledger.record(&[
        bound("j", "lost", (1, 0, 0, 2)),
        bound("j", "lost", (2, 0, 0, 4)),
        bound("j", "survivor", (2, 0, 1, 3)),
        bound("j", "survivor", (2, 0, 2, 1)),
    ]);
    // `lost` is lost: stage 2 is rolled back (attempt 1) and its task ids start again at
    // 0, now on the survivor.
    ledger.executor_lost("lost");
    assert_eq!(ledger.len(), 2, "the lost executor's tasks are forgotten");
    ledger.record(&[bound("j", "survivor", (2, 1, 0, 2))]);

    // The cancelled tasks of attempt 0 end on the survivor: what they took, not what the
    // new task 0 took, and nothing for a task of the lost executor.
    assert_eq!(
        ledger.refund_statuses(
            "survivor",
            &[status("j", (2, 0, 1)), status("j", (2, 0, 0))]
        ),
        3
    );
    assert_eq!(
        ledger.refund_statuses("survivor", &[status("j", (2, 0, 2))]),
        1
    );
    // A status sent twice is refunded once.
    assert_eq!(
        ledger.refund_statuses("survivor", &[status("j", (2, 0, 2))]),
        0
    );
    // Another executor cannot take back the survivor's vcores.
    assert_eq!(ledger.refund_statuses("lost", &[status("j", (2, 1, 0))]), 0);
    assert_eq!(
        ledger.refund_statuses("survivor", &[status("j", (2, 1, 0))]),
        2
    );
    assert!(ledger.is_empty());
}

#[test]
fn an_aborted_job_gives_back_its_tasks_once() {
    let ledger = BoundVcores::default();
    ledger.record(&[
        bound("aborted", "a", (1, 0, 0, 2)),
        bound("aborted", "a", (2, 1, 0, 3)),
        bound("aborted", "b", (2, 1, 1, 1)),
        bound("other", "a", (1, 0, 0, 5)),
    ]);
    let mut freed = ledger.refund_job(&JobId::from("aborted".to_string()));
    freed.sort();
    assert_eq!(freed, [("a".to_string(), 5), ("b".to_string(), 1)]);
    // The cancelled tasks' statuses, arriving afterwards, add nothing; the other job's do.
    assert_eq!(
        ledger.refund_statuses("a", &[status("aborted", (2, 1, 0))]),
        0
    );
    assert_eq!(
        ledger.refund_statuses("a", &[status("other", (1, 0, 0))]),
        5
    );
    assert!(ledger.is_empty());
}
