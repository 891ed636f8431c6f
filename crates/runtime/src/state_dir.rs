//! The state directory's layout, in one place: `<root>/<task>/<store>/` for each store,
//! `<root>/<task>/last-used`, `<root>/<task>/owner` (whose state it is), the instance's
//! `process-id` and `.lock` files, `<root>/<task>/<store>/changelog-layout` (the store's
//! changelog is in Kafka's layout), and `<root>/quarantine/` for stores moved aside.

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
/// Says which application and task a task directory's stores belong to.
const OWNER_FILE: &str = "owner";
/// In a store directory: its changelog holds Kafka Streams' record layout (a timestamped
/// store's value without its timestamp, which is the record's). Stores made before Baton
/// wrote that layout lack it.
const KAFKA_LAYOUT_FILE: &str = "changelog-layout";
const KAFKA_LAYOUT: &str = "kafka\n";
/// Damaged or foreign stores go here, kept for inspection; not a task name, so the cleaner
/// and [`StateDir::tasks`] pass it by.
const QUARANTINE_DIR: &str = "quarantine";

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

    /// Checks that `task`'s directory holds `application`'s state for `task`, and marks it so
    /// if it is unmarked. `Ok(false)`: it belongs to someone else (a directory renamed or
    /// copied by hand, another application's state dir): its stores must not be served.
    pub fn check_owner(&self, task: TaskId, application: &str) -> std::io::Result<bool> {
        let dir = self.task_dir(task);
        let path = dir.join(OWNER_FILE);
        let expected = owner_text(task, application);
        match std::fs::read_to_string(&path) {
            Ok(found) => Ok(found == expected),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&dir)?;
                std::fs::write(&path, expected)?;
                Ok(true)
            }
            // Unreadable is as good as foreign.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves a task's store (every store of the task if `store` is `None`) to the quarantine
    /// directory, for a rebuild from the changelog; returns where it went, or `None` if
    /// there was nothing to move. The owner mark goes with a whole task.
    pub fn move_aside(
        &self,
        task: TaskId,
        store: Option<&str>,
    ) -> std::io::Result<Option<PathBuf>> {
        let from = match store {
            Some(s) => self.store_dir(task, s),
            None => self.task_dir(task),
        };
        if !from.exists() {
            return Ok(None);
        }
        let quarantine = self.root.join(QUARANTINE_DIR);
        std::fs::create_dir_all(&quarantine)?;
        let name = match store {
            Some(s) => format!("{task}.{s}.{}", now_ms()),
            None => format!("{task}.{}", now_ms()),
        };
        let to = quarantine.join(name);
        std::fs::rename(&from, &to)?;
        Ok(Some(to))
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

fn owner_text(task: TaskId, application: &str) -> String {
    format!("application={application}\ntask={task}\n")
}

/// Marks the new store directory `dir` as one whose changelog is in Kafka's layout.
pub fn mark_kafka_layout(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(KAFKA_LAYOUT_FILE), KAFKA_LAYOUT)
}

/// Whether store directory `dir` was made by a Baton that writes Kafka's changelog layout
/// (or does not exist).
pub fn has_kafka_layout(dir: &Path) -> bool {
    !dir.exists() || dir.join(KAFKA_LAYOUT_FILE).exists()
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

    #[test]
    fn a_task_directory_knows_its_owner_and_foreign_stores_move_aside() {
        let root = std::env::temp_dir().join(format!("baton-owner-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = StateDir::new(&root);
        let (a, b) = (TaskId::new(0, 1), TaskId::new(0, 2));
        assert!(dir.check_owner(a, "app").unwrap(), "unmarked: claimed");
        assert!(dir.check_owner(a, "app").unwrap());
        assert!(!dir.check_owner(a, "other-app").unwrap());
        // Swapped by hand: b's directory now holds a's mark.
        std::fs::rename(dir.task_dir(a), dir.task_dir(b)).unwrap();
        assert!(!dir.check_owner(b, "app").unwrap());
        std::fs::create_dir_all(dir.store_dir(b, "counts")).unwrap();
        let moved = dir.move_aside(b, None).unwrap().unwrap();
        assert!(
            moved.starts_with(root.join("quarantine")),
            "{}",
            moved.display()
        );
        assert!(moved.join("counts").is_dir());
        assert!(!dir.task_dir(b).exists());
        assert_eq!(dir.move_aside(b, None).unwrap(), None);
        assert_eq!(
            dir.tasks(),
            Vec::<TaskId>::new(),
            "quarantine is not a task"
        );
        assert!(dir.check_owner(b, "app").unwrap());
        let _ = std::fs::remove_dir_all(&root);
    }
}
