// Licensed to the Apache Software Foundation (ASF) under one
// or more contributor license agreements.  See the NOTICE file
// distributed with this work for additional information
// regarding copyright ownership.  The ASF licenses this file
// to you under the Apache License, Version 2.0 (the
// "License"); you may not use this file except in compliance
// with the License.  You may obtain a copy of the License at
//
//   http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing,
// software distributed under the License is distributed on an
// "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
// KIND, either express or implied.  See the License for the
// specific language governing permissions and limitations
// under the License.

//! stacks patch: the vcores each bound task holds on its executor, kept from bind time
//! until the task's final status, its job's abort or its executor's loss.
//!
//! Push-staged scheduling refunds a task's vcores when its status arrives. Upstream
//! looks them up in the execution graph (`task_vcores`), which forgets a task once
//! its stage is rolled back or reset after an executor is lost: the statuses of the
//! surviving executors' tasks of such a stage then refunded nothing, their vcores
//! leaked, and once all were gone nothing more was offered to those executors (the
//! query hung). A task id is also reused by the next attempt of its stage, so the
//! graph could refund the vcores of another task. Here a task is known by its job,
//! stage, stage attempt and task id, and its vcores go back exactly once.

use std::collections::HashMap;
use std::sync::Mutex;

use ballista_core::JobId;
use ballista_core::serde::protobuf::TaskStatus;

use crate::cluster::{BoundTask, ExecutorSlot};

/// A bound task: job, stage, stage attempt, task id.
type Key = (JobId, usize, usize, usize);

/// The vcores of the bound tasks whose final status has not arrived yet.
#[derive(Debug, Default)]
pub struct BoundVcores {
    /// The executor each task was bound to and the vcores it took there.
    tasks: Mutex<HashMap<Key, (String, u32)>>,
}

impl BoundVcores {
    /// Remembers the vcores the tasks just bound took from their executors.
    pub fn record(&self, bound: &[BoundTask]) {
        let mut tasks = self.tasks.lock().unwrap();
        for (executor_id, task) in bound {
            let key = (
                task.key.job_id.clone(),
                task.key.stage_id,
                task.stage_attempt_num,
                task.key.task_id,
            );
            tasks.insert(key, (executor_id.clone(), task.vcores_consumed));
        }
    }

    /// Forgets the tasks whose statuses `executor_id` sent and returns the vcores
    /// they held there, whatever their stages became since; a status seen before
    /// (or of a task not bound here) adds nothing.
    pub fn refund_statuses(&self, executor_id: &str, statuses: &[TaskStatus]) -> u32 {
        let mut tasks = self.tasks.lock().unwrap();
        let mut vcores = 0;
        for status in statuses {
            let key = (
                JobId::from(status.job_id.clone()),
                status.stage_id as usize,
                status.stage_attempt_num as usize,
                status.task_id as usize,
            );
            if tasks.get(&key).is_some_and(|(e, _)| e == executor_id)
                && let Some((_, v)) = tasks.remove(&key)
            {
                vcores += v;
            }
        }
        vcores
    }

    /// Forgets the tasks of an aborted job and returns the vcores they held, by
    /// executor: their statuses, arriving after the job has gone, add nothing.
    pub fn refund_job(&self, job_id: &JobId) -> Vec<ExecutorSlot> {
        let mut tasks = self.tasks.lock().unwrap();
        let mut freed: HashMap<String, u32> = HashMap::new();
        tasks.retain(|key, (executor_id, vcores)| {
            if &key.0 == job_id {
                *freed.entry(executor_id.clone()).or_default() += *vcores;
                false
            } else {
                true
            }
        });
        freed.into_iter().collect()
    }

    /// Forgets the tasks of a lost executor: its vcores went with it.
    pub fn executor_lost(&self, executor_id: &str) {
        self.tasks
            .lock()
            .unwrap()
            .retain(|_, (e, _)| e != executor_id);
    }

    /// How many bound tasks wait for their final status.
    pub fn len(&self) -> usize {
        self.tasks.lock().unwrap().len()
    }

    /// Whether no bound task waits for its final status.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
