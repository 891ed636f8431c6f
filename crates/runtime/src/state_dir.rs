//! The state directory's layout, in one place: `<root>/<task>/<store>/` for each store,
//! `<root>/<task>/last-used`, and the instance's `process-id` and `.lock` files.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use baton_assignor::TaskId;

use crate::error::{Result, RuntimeError};

/// The file in a task directory that says when the task was last held.
const LAST_USED_FILE: &str = "last-used";
/// Keeps this instance's process id across restarts, so the assignor recognises its state.
const PROCESS_ID_FILE: &str = "process-id";
/// Its lock marks the state directory as in use.
const LOCK_FILE: &str = ".lock";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn task_dir(&self, task: TaskId) -> PathBuf {
        self.root.join(task.to_string())
    }

    pub fn store_dir(&self, task: TaskId, store: &str) -> PathBuf {
        store_dir(&self.root, task, store)
    }

    /// Records that `task` is held now.
    pub fn touch(&self, task: TaskId) {
        let path = self.task_dir(task).join(LAST_USED_FILE);
        if let Err(e) = std::fs::write(&path, now_ms().to_string()) {
            tracing::warn!(path = %path.display(), error = %e, "cannot record when a task was last used");
        }
    }

    /// When `task` was last held (milliseconds since the epoch); 0 if never recorded.
    pub fn last_used_ms(&self, task: TaskId) -> u128 {
        std::fs::read_to_string(self.task_dir(task).join(LAST_USED_FILE))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The task directories present, in task order. Other directories are not ours.
    pub fn tasks(&self) -> Vec<TaskId> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut out: Vec<TaskId> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        out.sort();
        out
    }

    /// Creates the directory and locks it for this process (an advisory lock the OS drops on
    /// exit, even after `kill -9`): a second instance on it is refused instead of waiting
    /// forever for stores this one holds.
    pub fn lock(&self) -> Result<std::fs::File> {
        std::fs::create_dir_all(&self.root).map_err(|source| RuntimeError::Io {
            what: format!("state dir {}", self.root.display()),
            source,
        })?;
        let path = self.root.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| RuntimeError::Io {
                what: format!("lock file {}", path.display()),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => Err(RuntimeError::Config(format!(
                "state dir {} is in use by another instance; give each instance its own",
                self.root.display()
            ))),
            Err(std::fs::TryLockError::Error(source)) => Err(RuntimeError::Io {
                what: format!("locking {}", path.display()),
                source,
            }),
        }
    }

    /// The process id kept here, created on first use.
    pub fn process_id(&self) -> Result<uuid::Uuid> {
        let path = self.root.join(PROCESS_ID_FILE);
        let io = |source| RuntimeError::Io {
            what: format!("process id file {}", path.display()),
            source,
        };
        match std::fs::read_to_string(&path) {
            Ok(s) => s.trim().parse().map_err(|e| {
                RuntimeError::Config(format!("{}: not a process id: {e}", path.display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let id = uuid::Uuid::new_v4();
                std::fs::write(&path, id.to_string()).map_err(io)?;
                Ok(id)
            }
            Err(e) => Err(io(e)),
        }
    }
}

/// `<root>/<task>/<store>/`.
pub fn store_dir(root: &Path, task: TaskId, store: &str) -> PathBuf {
    root.join(task.to_string()).join(store)
}

pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_dir_serves_one_instance_at_a_time_and_keeps_its_process_id() {
        let root = std::env::temp_dir().join(format!("baton-lock-{}", std::process::id()));
        let dir = StateDir::new(&root);
        let first = dir.lock().unwrap();
        let err = dir.lock().unwrap_err().to_string();
        assert!(err.contains("is in use by another instance"), "{err}");
        drop(first);
        dir.lock().unwrap();
        let id = dir.process_id().unwrap();
        assert_eq!(dir.process_id().unwrap(), id, "survives a restart");
        std::fs::create_dir_all(dir.task_dir(TaskId::new(1, 2))).unwrap();
        std::fs::create_dir_all(root.join("not-a-task")).unwrap();
        assert_eq!(dir.tasks(), vec![TaskId::new(1, 2)]);
        assert_eq!(dir.last_used_ms(TaskId::new(1, 2)), 0);
        dir.touch(TaskId::new(1, 2));
        assert!(dir.last_used_ms(TaskId::new(1, 2)) > 0);
        let _ = std::fs::remove_dir_all(&root);
    }
}
