//! Opening a task's stores, healing what cannot be trusted: a store whose files are damaged,
//! a task directory that holds another task's or application's state, or a store the caller
//! knows is from another life of its changelog (its checkpoint is past the changelog's end)
//! is moved aside (kept for inspection, and logged with where) and opened empty, to be rebuilt
//! from the changelog. Errors of the machine (a full disk, no permission) never get a store
//! thrown away: they are reported once, with the free space, and the open is retried later.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use baton_assignor::TaskId;

use crate::state_dir::StateDir;
use crate::store::{StoreError, TaskStore};

/// A store opened at its checkpoint (0 for a new or rebuilt store).
pub struct OpenedStore {
    pub name: String,
    pub store: TaskStore,
    pub checkpoint: i64,
    /// The changelog topic the checkpoint counts in, where the store recorded one.
    pub changelog_id: Option<uuid::Uuid>,
}

pub enum OpenError {
    /// Another thread of this process holds a store: retry soon.
    Busy,
    /// The open failed for a reason a later try may not have (disk full, permissions).
    Failed(String),
}

/// Remembers the last store failure of each task, so a failure repeated on every retry (a
/// full disk fails every open, restore and write until space returns) is logged once, with
/// the state directory's free space, and its end once too; not once per retry. A success
/// between failures (a write the memtable took) does not end the streak: only a quiet spell.
#[derive(Default)]
pub struct StoreFailures {
    /// Per task and kind of work: the last error, how often it came, and when it last did.
    last: BTreeMap<(TaskId, String), Streak>,
}

struct Streak {
    error: String,
    tries: u32,
    at: Instant,
}

/// A failure repeated within this is the same streak; a success this long after the last
/// failure ends it. The quiet spell is longer than the longest wait between retries (10 s):
/// with 5 s, a streak "ended" between two retries of the same full disk and was logged again.
const STREAK_GAP: Duration = Duration::from_secs(60);
const QUIET: Duration = Duration::from_secs(30);

impl StoreFailures {
    /// `task`'s streaks, taken out (for a batch that runs on another thread).
    pub fn take_task(&mut self, task: TaskId) -> StoreFailures {
        let keys: Vec<_> = self
            .last
            .keys()
            .filter(|(t, _)| *t == task)
            .cloned()
            .collect();
        let last = keys
            .into_iter()
            .filter_map(|k| self.last.remove_entry(&k))
            .collect();
        StoreFailures { last }
    }

    /// Takes back streaks [`StoreFailures::take_task`] took out.
    pub fn absorb(&mut self, part: StoreFailures) {
        self.last.extend(part.last);
    }

    /// `what` failed for `task` with `error`; the task waits and retries.
    pub fn failed(&mut self, task: TaskId, what: &str, error: &str, state_dir: &Path) {
        let key = (task, what.to_owned());
        let now = Instant::now();
        match self.last.get_mut(&key) {
            Some(s) if s.error == error && now.duration_since(s.at) < STREAK_GAP => {
                s.tries += 1;
                s.at = now;
                tracing::debug!(task = %task, error, tries = s.tries, "{what}: failed again");
            }
            _ => {
                tracing::error!(
                    task = %task,
                    error,
                    state_dir = %state_dir.display(),
                    free_bytes = free_bytes(state_dir).map_or("unknown".into(), |b| b.to_string()),
                    "{what}: the task waits and retries with backoff; its other tasks go on (logged once until it recovers)"
                );
                self.last.insert(
                    key,
                    Streak {
                        error: error.to_owned(),
                        tries: 1,
                        at: now,
                    },
                );
            }
        }
    }

    /// `task`'s store work succeeded: a failure streak quiet for a while is over.
    pub fn recovered(&mut self, task: TaskId) {
        let ended: Vec<(TaskId, String)> = self
            .last
            .range((task, String::new())..)
            .take_while(|((t, _), _)| *t == task)
            .filter(|(_, s)| s.at.elapsed() >= QUIET)
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            if let Some(s) = self.last.remove(&key) {
                tracing::info!(task = %task, what = %key.1, tries = s.tries, last_error = %s.error, "the task's stores work again");
            }
        }
    }
}

/// Opens `task`'s stores (`names`, in the topology's order). `rebuild`: why they must be
/// moved aside first, if they must.
pub fn open_stores(
    state_dir: &StateDir,
    application: &str,
    task: TaskId,
    names: &[&str],
    rebuild: Option<&str>,
    failures: &mut StoreFailures,
) -> Result<Vec<OpenedStore>, OpenError> {
    let fail = |failures: &mut StoreFailures, error: String| {
        failures.failed(task, "opening the task's stores", &error, state_dir.root());
        Err(OpenError::Failed(error))
    };
    if names.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(why) = rebuild {
        if let Err(e) = set_aside(state_dir, task, None, why) {
            return fail(failures, e.to_string());
        }
    }
    match state_dir.check_owner(task, application) {
        Ok(true) => {}
        Ok(false) => {
            if let Err(e) = set_aside(
                state_dir,
                task,
                None,
                "it holds another task's or application's state",
            ) {
                return fail(failures, e.to_string());
            }
            if let Err(e) = state_dir.check_owner(task, application) {
                return fail(failures, format!("marking the task directory: {e}"));
            }
        }
        Err(e) => return fail(failures, format!("reading the task directory's owner: {e}")),
    }
    let mut out = Vec::with_capacity(names.len());
    for &name in names {
        match open_one(state_dir, task, name) {
            Ok(s) => out.push(s),
            Err(StoreError::Busy { .. }) => return Err(OpenError::Busy),
            Err(e) if e.is_corrupt() => {
                if let Err(moved) = set_aside(state_dir, task, Some(name), &e.to_string()) {
                    return fail(failures, moved.to_string());
                }
                match open_one(state_dir, task, name) {
                    Ok(s) => out.push(s),
                    Err(StoreError::Busy { .. }) => return Err(OpenError::Busy),
                    Err(e) => return fail(failures, e.to_string()),
                }
            }
            Err(e) => return fail(failures, e.to_string()),
        }
    }
    Ok(out)
}

fn open_one(state_dir: &StateDir, task: TaskId, name: &str) -> Result<OpenedStore, StoreError> {
    let store = TaskStore::open(state_dir.root(), task, name)?;
    let checkpoint = store.checkpoint()?.unwrap_or(0);
    let changelog_id = store.changelog_id()?;
    Ok(OpenedStore {
        name: name.to_owned(),
        store,
        checkpoint,
        changelog_id,
    })
}

/// A corrupt or foreign store that could not be moved out of the way.
#[derive(Debug, thiserror::Error)]
#[error("moving the task's state aside: {0}")]
struct SetAsideFailed(std::io::Error);

/// Moves a store (or a whole task directory) aside, logging why and where to.
fn set_aside(
    state_dir: &StateDir,
    task: TaskId,
    store: Option<&str>,
    why: &str,
) -> Result<(), SetAsideFailed> {
    match state_dir.move_aside(task, store) {
        Ok(Some(to)) => {
            tracing::warn!(
                task = %task,
                store = store.unwrap_or("all"),
                why,
                moved_to = %to.display(),
                "state moved aside; rebuilding it from the changelog"
            );
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(SetAsideFailed(e)),
    }
}

/// Bytes free for unprivileged use on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    Some(s.blocks_available() as u64 * s.fragment_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(name: &str) -> std::path::PathBuf {
        let r = std::env::temp_dir().join(format!("baton-heal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&r);
        r
    }

    #[test]
    fn a_corrupt_store_is_moved_aside_and_opened_empty() {
        let r = root("corrupt");
        let dir = StateDir::new(&r);
        let task = TaskId::new(0, 3);
        let mut failures = StoreFailures::default();
        let s = open_stores(&dir, "app", task, &["counts"], None, &mut failures)
            .ok()
            .unwrap();
        s[0].store
            .apply(&[(b"k".to_vec(), Some(b"v".to_vec()))], Some(7))
            .unwrap();
        s[0].store.persist(true).unwrap();
        drop(s);
        // Damage every file of the store.
        for entry in walk(&dir.store_dir(task, "counts")) {
            std::fs::write(&entry, b"garbage, not an LSM file").unwrap();
        }
        let s = open_stores(&dir, "app", task, &["counts"], None, &mut failures)
            .ok()
            .unwrap();
        assert_eq!(s[0].checkpoint, 0, "rebuilt from scratch");
        assert_eq!(s[0].store.get(b"k").unwrap(), None);
        let kept: Vec<_> = std::fs::read_dir(r.join("quarantine"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(kept.len(), 1, "the damaged store is kept for inspection");
        let _ = std::fs::remove_dir_all(&r);
    }

    #[test]
    fn another_tasks_state_is_never_served() {
        let r = root("swap");
        let dir = StateDir::new(&r);
        let (a, b) = (TaskId::new(0, 1), TaskId::new(0, 2));
        let mut failures = StoreFailures::default();
        let s = open_stores(&dir, "app", a, &["counts"], None, &mut failures)
            .ok()
            .unwrap();
        s[0].store
            .apply(&[(b"k".to_vec(), Some(b"a's".to_vec()))], Some(5))
            .unwrap();
        drop(s);
        std::fs::rename(dir.task_dir(a), dir.task_dir(b)).unwrap();
        let s = open_stores(&dir, "app", b, &["counts"], None, &mut failures)
            .ok()
            .unwrap();
        assert_eq!(s[0].checkpoint, 0);
        assert_eq!(s[0].store.get(b"k").unwrap(), None);
        drop(s);
        // And a store the caller knows is from another life of its changelog.
        let s = open_stores(&dir, "app", b, &["counts"], None, &mut failures)
            .ok()
            .unwrap();
        s[0].store
            .apply(&[(b"k".to_vec(), Some(b"old".to_vec()))], Some(9))
            .unwrap();
        drop(s);
        let s = open_stores(&dir, "app", b, &["counts"], Some("test"), &mut failures)
            .ok()
            .unwrap();
        assert_eq!(s[0].checkpoint, 0);
        let _ = std::fs::remove_dir_all(&r);
    }

    fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
