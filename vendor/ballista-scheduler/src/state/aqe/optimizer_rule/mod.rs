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

pub mod chaos_exec;
pub mod coalesce_partitions;
pub mod demote_broadcast_join;
pub mod distributed_exchange;
pub mod join_selection;
pub mod normalize_interleave;
pub mod parallel_window;
pub mod prefix_window;
pub mod propagate_empty;

pub use coalesce_partitions::*;
pub use demote_broadcast_join::*;
pub use distributed_exchange::*;
pub use join_selection::*;
pub use normalize_interleave::*;
pub use parallel_window::*;
pub use prefix_window::*;
pub use propagate_empty::*;
