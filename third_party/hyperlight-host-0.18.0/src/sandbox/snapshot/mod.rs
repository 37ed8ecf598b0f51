// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.

mod file;
mod file_tests;
#[cfg(target_arch = "x86_64")]
mod incremental;
mod tripwires;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub(crate) use file::host_cpu_vendor_golden_tag;
pub use file::ExistingBlob;
pub use file::reference::{OciDigest, OciReference, OciTag};
use hyperlight_common::flatbuffer_wrappers::host_function_details::HostFunctionDetails;
use hyperlight_common::layout::{io_page, scratch_base_gpa, scratch_base_gva};
use hyperlight_common::vmem;
use hyperlight_common::vmem::{
    BasicMapping, CowMapping, Mapping, MappingKind, PAGE_SIZE, SpaceAwareMapping, SpaceId, TableOps,
};
use tracing::{Span, instrument};

use crate::Result;
use crate::hypervisor::regs::CommonSpecialRegisters;
#[cfg(target_arch = "x86_64")]
use crate::hypervisor::regs::MsrEntry;
use crate::mem::exe::{ExeInfo, LoadInfo};
use crate::mem::layout::SandboxMemoryLayout;
use crate::mem::memory_region::{MemoryRegion, MemoryRegionFlags};
use crate::mem::mgr::{GuestPageTableBuffer, SnapshotSharedMemory};
use crate::mem::shared_mem::{ReadonlySharedMemory, SharedMemory};
use crate::mem::virtq::VirtqSnapshot;
use crate::sandbox::SandboxConfiguration;
use crate::sandbox::uninitialized::{GuestBinary, GuestEnvironment};

const PTE_SIZE: usize = size_of::<vmem::PageTableEntry>();

/// Presently, a snapshot can be of a preinitialised sandbox, which
/// still needs an initialise function called in order to determine
/// how to call into it, or of an already-properly-initialised sandbox
/// which can be immediately called into. This keeps track of the
/// difference.
///
/// TODO: this should not necessarily be around in the long term:
/// ideally we would just preinitialise earlier in the snapshot
/// creation process and never need this.
#[derive(Copy, Clone, PartialEq, Eq)]
pub enum NextAction {
    /// A sandbox in the preinitialise state still needs to be
    /// initialised by calling the initialise function
    Initialise(u64),
    /// A sandbox in the ready state can immediately be called into,
    /// using the dispatch function pointer.
    Call(u64),
    /// Only when compiling for tests: a sandbox that cannot actually
    /// be used
    #[cfg(test)]
    None,
}

/// An immutable snapshot of sandbox state.
pub struct Snapshot {
    state: Arc<SnapshotState>,
    // Stable key order keeps config bytes deterministic.
    metadata: BTreeMap<String, serde_json::Value>,
}

/// Immutable sandbox state held by a snapshot.
struct SnapshotState {
    /// Layout object for the sandbox. TODO: get rid of this and
    /// replace with something saner and set up from the guest (early
    /// on?).
    layout: crate::mem::layout::SandboxMemoryLayout,
    /// Memory of the sandbox at the time this snapshot was taken
    memory: ReadonlySharedMemory,
    /// Extra debug information about the binary in this snapshot,
    /// from when the binary was first loaded into the snapshot.
    ///
    /// This information is provided on a best-effort basis, and there
    /// is a pretty good chance that it does not exist; generally speaking,
    /// things like persisting a snapshot and reloading it are likely
    /// to destroy this information.
    load_info: LoadInfo,
    /// The address of the top of the guest stack
    stack_top_gva: u64,

    /// Special register state captured from the vCPU during snapshot.
    /// None for snapshots created directly from a binary (before
    /// guest runs).  Some for snapshots taken from a running sandbox.
    /// Note: CR3 in this struct is NOT used on restore, since page
    /// tables are relocated during snapshot.
    sregs: Option<CommonSpecialRegisters>,

    /// The MSRs saved in this snapshot. None before the guest has run.
    #[cfg(target_arch = "x86_64")]
    msrs: Option<Vec<MsrEntry>>,

    /// The next action that should be performed on this snapshot
    next_action: NextAction,

    /// Guest virtual address of the guest binary's ELF entry point
    /// (`code GVA + e_entry - base_va`). Unlike `next_action`, which
    /// transitions to `Call(dispatch_addr)` once the guest has run,
    /// this preserves the original entry across that transition. Used
    /// to fill `AT_ENTRY` in guest core dumps so a debugger can
    /// compute the PIE load bias. 0 if unknown (e.g. an older
    /// on-disk snapshot that predates this field).
    original_entrypoint: u64,

    /// The generation number assigned to this snapshot when it was
    /// taken — i.e. "this is the Nth snapshot taken from the sandbox's
    /// execution path from init to here". Propagated into the
    /// restored sandbox's guest-visible counter so the guest can tell
    /// which snapshot it is currently a clone of.
    snapshot_generation: u64,

    /// Names and signatures of host functions registered on the
    /// sandbox at the time this snapshot was taken. Used by
    /// [`crate::Sandbox::from_snapshot`] to reject a
    /// `HostFunctions` set that is missing required functions or
    /// has mismatched signatures.
    host_functions: HostFunctionDetails,

    /// Validated ring images omitted from ordinary snapshot pages.
    ///
    /// Construction and loading validate these images against `layout`.
    /// Both the images and layout remain immutable afterwards.
    virtq: Option<VirtqSnapshot>,
}

/// The previous snapshot's pages are read through the mappings of the
/// files that hold them, so that reading them maps nothing else.
#[cfg(all(target_arch = "x86_64", unix))]
impl incremental::Pages for ReadonlySharedMemory {
    fn page(&self, offset: usize) -> Option<&[u8]> {
        self.bytes_at(offset, PAGE_SIZE)
    }
}

impl core::convert::AsRef<Snapshot> for Snapshot {
    fn as_ref(&self) -> &Self {
        self
    }
}
impl hyperlight_common::vmem::TableReadOps for Snapshot {
    type TableAddr = u64;
    fn entry_addr(addr: u64, offset: u64) -> u64 {
        addr + offset
    }
    unsafe fn read_entry(&self, addr: u64) -> vmem::PageTableEntry {
        let addr = addr as usize;
        #[cfg(unix)]
        let pte_bytes = self.state.memory.bytes_at(addr, PTE_SIZE);
        #[cfg(not(unix))]
        let pte_bytes = self.state.memory.as_slice().get(addr..addr + PTE_SIZE);
        let Some(pte_bytes) = pte_bytes else {
            // Attacker-controlled data pointed out-of-bounds. We'll
            // default to returning 0 in this case, which, for most
            // architectures (including x86-64 and arm64, the ones we
            // care about presently) will be a not-present entry.
            return 0;
        };
        // The `get()` above ensures exactly PTE_SIZE bytes.
        #[allow(clippy::unwrap_used)]
        vmem::PageTableEntry::from_le_bytes(pte_bytes.try_into().unwrap())
    }
    #[allow(clippy::unnecessary_cast)]
    fn to_phys(addr: u64) -> vmem::PhysAddr {
        addr as vmem::PhysAddr
    }
    #[allow(clippy::unnecessary_cast)]
    fn from_phys(addr: vmem::PhysAddr) -> u64 {
        addr as u64
    }
    fn root_table(&self) -> u64 {
        self.root_pt_gpa()
    }
}

pub(crate) fn access_gpa<'a>(
    snap: &'a [u8],
    scratch: &'a [u8],
    layout: SandboxMemoryLayout,
    gpa: u64,
) -> Option<(&'a [u8], usize)> {
    let resolved = layout.resolve_gpa(gpa, &[])?.with_memories(snap, scratch);
    Some((resolved.base.as_ref(), resolved.offset))
}

pub(crate) struct SharedMemoryPageTableBuffer<'a> {
    snap: &'a [u8],
    scratch: &'a [u8],
    layout: SandboxMemoryLayout,
    root: u64,
}
impl<'a> SharedMemoryPageTableBuffer<'a> {
    pub(crate) fn new(
        snap: &'a [u8],
        scratch: &'a [u8],
        layout: SandboxMemoryLayout,
        root: u64,
    ) -> Self {
        Self {
            snap,
            scratch,
            layout,
            root,
        }
    }
}
impl<'a> hyperlight_common::vmem::TableReadOps for SharedMemoryPageTableBuffer<'a> {
    type TableAddr = u64;
    fn entry_addr(addr: u64, offset: u64) -> u64 {
        addr + offset
    }
    unsafe fn read_entry(&self, addr: u64) -> vmem::PageTableEntry {
        let memoff = access_gpa(self.snap, self.scratch, self.layout, addr);
        let Some(pte_bytes) = memoff.and_then(|(mem, off)| mem.get(off..off + PTE_SIZE)) else {
            // Attacker-controlled data pointed out-of-bounds. We'll
            // default to returning 0 in this case, which, for most
            // architectures (including x86-64 and arm64, the ones we
            // care about presently) will be a not-present entry.
            return 0;
        };
        // The `get()` above ensures exactly PTE_SIZE bytes.
        #[allow(clippy::unwrap_used)]
        vmem::PageTableEntry::from_le_bytes(pte_bytes.try_into().unwrap())
    }
    #[allow(clippy::unnecessary_cast)]
    fn to_phys(addr: u64) -> vmem::PhysAddr {
        addr as vmem::PhysAddr
    }
    #[allow(clippy::unnecessary_cast)]
    fn from_phys(addr: vmem::PhysAddr) -> u64 {
        addr as u64
    }
    fn root_table(&self) -> u64 {
        self.root
    }
}
impl<'a> core::convert::AsRef<SharedMemoryPageTableBuffer<'a>> for SharedMemoryPageTableBuffer<'a> {
    fn as_ref(&self) -> &Self {
        self
    }
}
/// Return true if `virt_base` is a VA we must not preserve into the
/// rebuilt snapshot page tables: it is either part of the scratch
/// region (re-mapped freshly by `map_specials`) or, on amd64, part of
/// the self-map of the snapshot's own page tables.
fn skip_virt(virt_base: u64, scratch_gva: u64) -> bool {
    if virt_base >= scratch_gva {
        return true;
    }
    if virt_base >= hyperlight_common::layout::SNAPSHOT_PT_GVA_MIN as u64
        && virt_base <= hyperlight_common::layout::SNAPSHOT_PT_GVA_MAX as u64
    {
        return true;
    }
    false
}

/// Find the contents of the page which starts at gpa in guest physical
/// memory, taking into account excess host->guest regions
///
/// # Safety
/// The host side of the regions identified by MemoryRegion must be
/// alive and must not be mutated by any other thread: references to
/// these regions may be created and live for `'a`.
unsafe fn guest_page<'a>(
    snap: &'a [u8],
    scratch: &'a [u8],
    regions: &[MemoryRegion],
    layout: SandboxMemoryLayout,
    gpa: u64,
) -> Option<&'a [u8]> {
    let resolved = layout
        .resolve_gpa(gpa, regions)?
        .with_memories(snap, scratch);
    if resolved.as_ref().len() < PAGE_SIZE {
        return None;
    }
    Some(&resolved.as_ref()[..PAGE_SIZE])
}

fn map_specials(pt_buf: &GuestPageTableBuffer, scratch_size: usize) {
    if let Some((phys_base, virt_base)) = io_page() {
        // Map the IO page
        let mapping = Mapping {
            phys_base,
            virt_base,
            len: PAGE_SIZE as u64,
            kind: MappingKind::Basic(BasicMapping {
                readable: true,
                writable: true,
                executable: false,
            }),
        };
        unsafe { vmem::map(pt_buf, mapping) };
    }
    // Map the scratch region
    let mapping = Mapping {
        phys_base: scratch_base_gpa(scratch_size),
        virt_base: scratch_base_gva(scratch_size),
        len: scratch_size as u64,
        kind: MappingKind::Basic(BasicMapping {
            readable: true,
            writable: true,
            // assume that the guest will map these pages elsewhere if
            // it actually needs to execute from them
            executable: false,
        }),
    };
    unsafe { vmem::map(pt_buf, mapping) };
}

/// Most runs the guest-visible part of a snapshot's memory is made of
/// before a snapshot taken from it folds them: each snapshot taken
/// from a sandbox adds a run of its own (the pages it copied), so that
/// a session of many snapshots would otherwise be mapped from as many
/// pieces, and keep every page it overwrote. A snapshot past the limit
/// keeps the first [`KEPT_ON_FOLD`] runs and copies the live pages of
/// the others.
const MAX_RUNS: usize = 8;

/// Runs a fold keeps: the snapshot the chain started from, shared by
/// every chain that starts there, is the first runs, and more than one
/// (a snapshot of a guest after its initialisation is the memory it
/// was built with, then the pages its initialisation wrote): a fold
/// that kept only the first run copied every page the initialisation
/// wrote into the new snapshot (60 MiB to a GiB, measured), the newest
/// runs hold what the chain itself wrote.
const KEPT_ON_FOLD: usize = MAX_RUNS / 2;

/// A file a snapshot's memory is mapped from (see
/// [`Snapshot::memory_files`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnapshotFile {
    /// Its device number and inode number, which together tell it
    /// from every other file for as long as it exists.
    pub device: u64,
    /// Its inode number on that device.
    pub inode: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Made in this process (its pages are memory the process holds),
    /// rather than a file on disk mapped (its pages are the file's
    /// cache).
    pub in_memory: bool,
}

/// A snapshot a sandbox took since it was restored, and where the
/// pages it copied went: the sandbox's next snapshot, if it runs on
/// without a restore, shares those that did not change since.
#[derive(Clone)]
pub(crate) struct Taken {
    memory: ReadonlySharedMemory,
    /// For each page it copied, by the guest physical address the
    /// sandbox has it at, its address in the snapshot.
    copies: Arc<HashMap<u64, u64>>,
    /// Whether it kept every page of the memory the sandbox was
    /// restored to where it was (it folded none away).
    shares_restored: bool,
}

/// Most runs the page tables of a snapshot's memory are mapped from
/// (each a mapping of its own, counted against the process's limit):
/// a new snapshot copies the shortest stretches of unchanged tables
/// between changed ones, with them, until its tables fit.
#[cfg(all(unix, not(unshared_snapshot_mem)))]
const MAX_TABLE_RUNS: usize = 32;

/// A new snapshot's own memory: the pages it copied, which the guest
/// sees after the kept ones, and its page tables, which follow them in
/// the host mapping.
struct NewMemory {
    pages: Vec<u8>,
    tables: PageTables,
}

/// A new snapshot's page tables, one for each entry of `at`: in
/// `bytes` (at `at[i]`, in pages) or, where `at[i]` is `None`, the
/// parent's table at the same index, unchanged (none is, after a full
/// rebuild), which the new snapshot shares rather than copies.
pub(super) struct PageTables {
    bytes: Vec<u8>,
    at: Vec<Option<usize>>,
}

impl PageTables {
    /// Tables all of their own, in order.
    fn whole(bytes: Vec<u8>) -> Self {
        let count = bytes.len() / PAGE_SIZE;
        PageTables {
            bytes,
            at: (0..count).map(Some).collect(),
        }
    }

    fn count(&self) -> usize {
        self.at.len()
    }

    fn unchanged(&self, table: usize) -> bool {
        matches!(self.at.get(table), Some(None))
    }

    /// Table `table`: its own, or `parent`'s (the tables the parent's
    /// memory holds from `from`).
    #[cfg(all(unix, not(unshared_snapshot_mem)))]
    fn table<'a>(&'a self, table: usize, parent: &'a [u8], from: usize) -> &'a [u8] {
        match self.at[table] {
            Some(k) => &self.bytes[k * PAGE_SIZE..(k + 1) * PAGE_SIZE],
            None => &parent[from + table * PAGE_SIZE..from + (table + 1) * PAGE_SIZE],
        }
    }
}

/// What a new snapshot shares with the snapshot memory its sandbox
/// runs on (the snapshot it was restored from): the first `len` bytes
/// of it, made of `runs`, mapped at the same guest addresses.
struct Kept {
    len: usize,
    #[cfg(all(unix, not(unshared_snapshot_mem)))]
    runs: Vec<crate::mem::shared_mem::SnapshotRun>,
}

impl Kept {
    #[cfg(all(unix, not(unshared_snapshot_mem)))]
    fn of(parent: &ReadonlySharedMemory) -> Self {
        let Some(mut runs) = parent.runs_within(parent.guest_mapped_size()) else {
            return Kept {
                len: 0,
                runs: Vec::new(),
            };
        };
        if runs.len() >= MAX_RUNS {
            runs.truncate(KEPT_ON_FOLD);
        }
        Kept {
            len: runs.iter().map(|r| r.len).sum(),
            runs,
        }
    }

    /// Writable snapshot memory (gdb) cannot be shared, nor can memory
    /// outside Linux: everything is copied.
    #[cfg(not(all(unix, not(unshared_snapshot_mem))))]
    fn of<M>(_parent: &M) -> Self {
        Kept { len: 0 }
    }

    /// The new snapshot's memory: the kept runs, then `pages`, which
    /// the guest sees, then the page tables' host-side tail, the tables
    /// that are `parent`'s (the snapshot memory its sandbox was restored
    /// from, whose tables follow the pages its guest sees) unchanged
    /// shared with it rather than copied.
    #[cfg(all(unix, not(unshared_snapshot_mem)))]
    fn extend(
        self,
        pages: Vec<u8>,
        tables: &PageTables,
        parent: &ReadonlySharedMemory,
    ) -> Result<ReadonlySharedMemory> {
        use crate::mem::shared_mem::{Piece, SnapshotRun};
        let new_guest_bytes = pages.len();
        let guest = self.len + new_guest_bytes;
        let at = parent.guest_mapped_size();
        let count = tables.count();
        // The stretches of tables the parent has unchanged, and its runs
        // that hold each; the shortest copied until the tables fit.
        let mut shared: Vec<(std::ops::Range<usize>, Vec<SnapshotRun>)> = Vec::new();
        let mut i = 0;
        while i < count {
            let unchanged = |t: usize| tables.unchanged(t);
            if !unchanged(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < count && unchanged(i) {
                i += 1;
            }
            let bytes = at + start * PAGE_SIZE..at + i * PAGE_SIZE;
            if let Some(runs) = parent.runs_of(bytes.start, bytes.len()) {
                shared.push((start..i, runs));
            }
        }
        let runs = |shared: &[(std::ops::Range<usize>, Vec<SnapshotRun>)]| {
            shared.iter().map(|(_, runs)| runs.len() + 1).sum::<usize>() + 1
        };
        while runs(&shared) > MAX_TABLE_RUNS {
            let Some(shortest) = (0..shared.len()).min_by_key(|&k| shared[k].0.len()) else {
                break;
            };
            shared.remove(shortest);
        }
        let mut own = pages;
        let mut pieces = vec![Piece::Shared(self.runs), Piece::Own(0..new_guest_bytes)];
        let parent_bytes = parent.as_slice();
        let mut copy = |pieces: &mut Vec<Piece>, range: std::ops::Range<usize>| {
            if range.is_empty() {
                return;
            }
            let start = own.len();
            for t in range {
                own.extend_from_slice(tables.table(t, parent_bytes, at));
            }
            pieces.push(Piece::Own(start..own.len()));
        };
        let mut next = 0;
        for (stretch, runs) in shared {
            copy(&mut pieces, next..stretch.start);
            pieces.push(Piece::Shared(runs));
            next = stretch.end;
        }
        copy(&mut pieces, next..count);
        Ok(ReadonlySharedMemory::compose(pieces, &own, guest)?)
    }

    /// Elsewhere every table is the snapshot's own (a full rebuild).
    #[cfg(not(all(unix, not(unshared_snapshot_mem))))]
    fn extend<M>(
        self,
        mut pages: Vec<u8>,
        tables: &PageTables,
        _parent: &M,
    ) -> Result<ReadonlySharedMemory> {
        let new_guest_bytes = pages.len();
        pages.extend_from_slice(&tables.bytes);
        Ok(ReadonlySharedMemory::from_bytes(&pages, new_guest_bytes)?)
    }
}

impl Snapshot {
    /// Create a new snapshot from the guest binary identified by `env`. With the configuration
    /// specified in `cfg`.
    pub(crate) fn from_env<'b>(
        env: impl Into<GuestEnvironment<'b>>,
        cfg: SandboxConfiguration,
    ) -> Result<Self> {
        let env = env.into();
        let mut bin = env.guest_binary;
        bin.canonicalize()?;
        let blob = env.init_data;

        let exe_info = match bin {
            GuestBinary::FilePath(bin_path) => ExeInfo::from_file(&bin_path)?,
            GuestBinary::Buffer(buffer) => ExeInfo::from_buf(buffer)?,
        };

        // Check guest/host version compatibility.
        let host_version = env!("CARGO_PKG_VERSION");
        if let Some(v) = exe_info.guest_bin_version()
            && v != host_version
        {
            return Err(crate::HyperlightError::GuestBinVersionMismatch {
                guest_bin_version: v.to_string(),
                host_version: host_version.to_string(),
            });
        }

        let guest_blob_size = blob.as_ref().map(|b| b.data.len()).unwrap_or(0);
        let guest_blob_mem_flags = blob.as_ref().map(|b| b.permissions);

        let mut layout = crate::mem::layout::SandboxMemoryLayout::new(
            cfg,
            exe_info.loaded_size(),
            guest_blob_size,
            guest_blob_mem_flags,
        )?;

        let load_addr = layout.get_guest_code_gpa() as u64;
        let base_va = exe_info.base_va();
        let entrypoint_va: u64 = exe_info.entrypoint().into();
        let is_pie = exe_info.is_pie();

        let code_gva = if is_pie { load_addr } else { base_va };
        layout.set_code_gva(code_gva)?;
        let regions = layout.get_memory_regions()?;

        let mut memory = vec![0; layout.get_memory_size()?];

        let load_info = exe_info.load(
            layout.get_guest_code_gva() as u64,
            &mut memory[layout.guest_code_offset()..],
        )?;

        layout.write_peb(&mut memory)?;

        blob.map(|x| layout.write_init_data(&mut memory, x.data))
            .transpose()?;

        // Set up page table entries for the snapshot
        let pt_buf = GuestPageTableBuffer::new(layout.get_pt_base_gpa() as usize);

        // 1. Map the (ideally readonly) pages of snapshot data
        for rgn in regions.iter() {
            let readable = rgn.flags.contains(MemoryRegionFlags::READ);
            let executable = rgn.flags.contains(MemoryRegionFlags::EXECUTE);
            let writable = rgn.flags.contains(MemoryRegionFlags::WRITE);
            let kind = if writable {
                MappingKind::Cow(CowMapping {
                    readable,
                    executable,
                })
            } else {
                MappingKind::Basic(BasicMapping {
                    readable,
                    writable: false,
                    executable,
                })
            };

            let mapping = Mapping {
                phys_base: rgn.host_region.start as u64,
                virt_base: rgn.guest_region.start as u64,
                len: rgn.guest_region.len() as u64,
                kind,
            };
            unsafe { vmem::map(&pt_buf, mapping) };
        }

        // 2. Map the special mappings
        map_specials(&pt_buf, layout.get_scratch_size());

        let pt_bytes = pt_buf.into_bytes();
        layout.set_pt_size(pt_bytes.len())?;
        memory.extend(&pt_bytes);

        let exn_stack_top_gva = hyperlight_common::layout::SCRATCH_TOP_GVA as u64
            - hyperlight_common::layout::SCRATCH_TOP_EXN_STACK_OFFSET
            + 1;

        let entrypoint_offset = entrypoint_va.checked_sub(base_va).ok_or_else(|| {
            crate::new_error!(
                "ELF entrypoint VA ({:#x}) is below base VA ({:#x})",
                entrypoint_va,
                base_va
            )
        })?;

        let entrypoint_gva = (layout.get_guest_code_gva() as u64)
            .checked_add(entrypoint_offset)
            .ok_or_else(|| crate::new_error!("ELF entrypoint GVA overflows"))?;

        Ok(Self {
            state: Arc::new(SnapshotState {
                memory: ReadonlySharedMemory::from_bytes(&memory, layout.snapshot_size())?,
                layout,
                load_info,
                stack_top_gva: exn_stack_top_gva,
                sregs: None,
                #[cfg(target_arch = "x86_64")]
                msrs: None,
                next_action: NextAction::Initialise(entrypoint_gva),
                original_entrypoint: entrypoint_gva,
                snapshot_generation: 0,
                host_functions: HostFunctionDetails {
                    host_functions: None,
                },
                virtq: None,
            }),
            metadata: BTreeMap::new(),
        })
    }

    // It might be nice to consider moving at least stack_top_gva into
    // layout, and sharing (via RwLock or similar) the layout between
    // the (host-side) mem mgr (where it can be passed in here) and
    // the sandbox vm itself (which modifies it as it receives
    // requests from the sandbox).
    #[allow(clippy::too_many_arguments)]
    /// Capture memory with optional validated transport images.
    ///
    /// Page-table and snapshot sizes do not affect transport geometry.
    #[instrument(err(Debug), skip_all, parent = Span::current(), level= "Trace")]
    pub(crate) fn new<S: SharedMemory>(
        shared_mem: &mut SnapshotSharedMemory<S>,
        scratch_mem: &mut S,
        since_restore: &mut Option<Taken>,
        mut layout: SandboxMemoryLayout,
        load_info: LoadInfo,
        regions: Vec<MemoryRegion>,
        root_pt_gpas: &[u64],
        stack_top_gva: u64,
        sregs: CommonSpecialRegisters,
        #[cfg(target_arch = "x86_64")] msrs: Vec<MsrEntry>,
        next_action: NextAction,
        original_entrypoint: u64,
        snapshot_generation: u64,
        host_functions: HostFunctionDetails,
        virtq: Option<VirtqSnapshot>,
    ) -> Result<Self> {
        let mut phys_seen = HashMap::<u64, usize>::new();
        let scratch_gva = scratch_base_gva(layout.get_scratch_size());
        // The pages of the sandbox's snapshot memory that the new
        // snapshot shares: they keep their addresses, and only the
        // other pages are copied, after them. A sandbox that ran on
        // after a snapshot shares that snapshot's pages too.
        let previous = since_restore.take().filter(|taken| taken.shares_restored);
        let restored_len = layout.snapshot_size();
        let kept = match &previous {
            Some(taken) => Kept::of(&taken.memory),
            None => Kept::of(shared_mem),
        };
        let mut copies = HashMap::new();

        let started = std::time::Instant::now();
        let kept_gpas =
            SandboxMemoryLayout::BASE_ADDRESS..SandboxMemoryLayout::BASE_ADDRESS + kept.len;
        // The pages the full rebuild leaves where they are: kept ones
        // the sandbox has at those very addresses, which are those of
        // the restored snapshot. Past it the sandbox's addresses are
        // another region's (a file mapped after the snapshot), not the
        // previous snapshot's copies.
        let in_place = kept_gpas.start..kept_gpas.end.min(kept_gpas.start + restored_len);
        let incremental = Self::incremental(
            shared_mem,
            scratch_mem,
            &regions,
            &mut layout,
            root_pt_gpas,
            &kept,
            previous.as_ref(),
            &mut copies,
        )?;

        let is_incremental = incremental.is_some();
        let new = match incremental {
            Some(new) => new,
            None => shared_mem.with_contents(|snap_c| {
            scratch_mem.with_contents(|scratch_c| {
                // Phase 1: walk every PT root together. This detects
                // aliased intermediate tables (e.g. Nanvix's kernel-
                // half PTs, which multiple process PDs share by
                // pointing at the same PT page). The walker emits
                // `ThisSpace(leaf)` for private leaves and
                // `AnotherSpace(ref)` for sub-trees that were already
                // seen via an earlier root. Results are returned in
                // `root_pt_gpas` order — which is also the topological
                // order of the `AnotherSpace` references — so
                // processing in iteration order is safe.
                let op = SharedMemoryPageTableBuffer::new(
                    snap_c,
                    scratch_c,
                    layout,
                    root_pt_gpas.first().copied().unwrap_or(0),
                );
                let walk = unsafe {
                    vmem::walk_va_spaces(
                        &op,
                        root_pt_gpas,
                        0,
                        hyperlight_common::layout::SCRATCH_TOP_GVA as u64,
                    )
                };

                // Phase 2: rebuild each space's page tables, compacting
                // `ThisSpace` leaves into a dense snapshot blob and
                // linking `AnotherSpace` entries to already-built
                // spaces' tables.
                // TODO: Look for opportunities to hugepage map
                let mut snapshot_memory: Vec<u8> = Vec::new();
                let pt_buf = GuestPageTableBuffer::new(layout.get_pt_base_gpa() as usize);
                // Allocate one root table per space and remember the
                // addresses returned by `alloc_table` instead of
                // assuming the buffer's physical layout.
                let mut root_addrs: Vec<u64> = Vec::with_capacity(root_pt_gpas.len());
                root_addrs.push(pt_buf.initial_root());
                for _ in 1..root_pt_gpas.len() {
                    root_addrs.push(unsafe { pt_buf.alloc_table() });
                }

                let mut built_roots: BTreeMap<SpaceId, u64> = BTreeMap::new();
                for (root_idx, (space_id, mappings)) in walk.into_iter().enumerate() {
                    pt_buf.set_root(root_addrs[root_idx]);
                    built_roots.insert(space_id, root_addrs[root_idx]);

                    for sam in mappings {
                        match sam {
                            SpaceAwareMapping::ThisSpace(mapping) => {
                                // Drop the scratch region and (on
                                // amd64) the snapshot's own PT
                                // self-map; both are re-mapped
                                // freshly by `map_specials`.
                                if skip_virt(mapping.virt_base, scratch_gva) {
                                    continue;
                                }

                                // Writable pages become CoW in the
                                // rebuilt snapshot; read-only pages
                                // stay read-only.
                                let (kind, has_contents) = match mapping.kind {
                                    MappingKind::Cow(cm) => (MappingKind::Cow(cm), true),
                                    MappingKind::Basic(bm) if bm.writable => (
                                        MappingKind::Cow(CowMapping {
                                            readable: bm.readable,
                                            executable: bm.executable,
                                        }),
                                        true,
                                    ),
                                    MappingKind::Basic(bm) => (
                                        MappingKind::Basic(BasicMapping {
                                            readable: bm.readable,
                                            writable: false,
                                            executable: bm.executable,
                                        }),
                                        true,
                                    ),
                                    MappingKind::Unmapped => continue,
                                    MappingKind::ZeroInit(bm) => (MappingKind::ZeroInit(bm), false),
                                };
                                let new_gpa = if has_contents {
                                    let Some(contents) = (unsafe {
                                        guest_page(
                                            snap_c,
                                            scratch_c,
                                            &regions,
                                            layout,
                                            mapping.phys_base,
                                        )
                                    }) else {
                                        continue;
                                    };
                                    Some(*phys_seen.entry(mapping.phys_base).or_insert_with(|| {
                                        let gpa = mapping.phys_base as usize;
                                        if in_place.contains(&gpa) {
                                            return gpa;
                                        }
                                        let new_offset = snapshot_memory.len();
                                        snapshot_memory.extend(contents);
                                        new_offset + kept_gpas.end
                                    }))
                                } else {
                                    None
                                };

                                let compacted = Mapping {
                                    phys_base: new_gpa.unwrap_or(0) as u64,
                                    virt_base: mapping.virt_base,
                                    len: PAGE_SIZE as u64,
                                    kind,
                                };
                                unsafe { vmem::map(&pt_buf, compacted) };
                            }
                            SpaceAwareMapping::AnotherSpace(ref_map) => {
                                // Link to the owning space's already-
                                // rebuilt intermediate table — this
                                // is what preserves Nanvix's
                                // kernel-half-shared invariant across
                                // process PDs after relocation.
                                unsafe {
                                    vmem::space_aware_map(&pt_buf, ref_map, &built_roots);
                                }
                            }
                        }
                    }
                }

                // Phase 3: Map the scratch region into each root.
                for &root_addr in &root_addrs {
                    pt_buf.set_root(root_addr);
                    map_specials(&pt_buf, layout.get_scratch_size());
                }
                pt_buf.set_root(pt_buf.initial_root());

                snapshot_memory.resize(
                    snapshot_memory.len().next_multiple_of(page_size::get()),
                    0u8,
                );

                // Phase 4: finalize PT bytes.
                let pt_data = pt_buf.into_bytes();
                layout.set_pt_size(pt_data.len())?;
                Ok::<_, crate::HyperlightError>(NewMemory {
                    pages: snapshot_memory,
                    tables: PageTables::whole(pt_data.into_vec()),
                })
            })
        })???,
        };
        // Only the data prefix is exposed to the guest: the kept
        // pages, then the copied ones. The PT tail sits past it in the
        // host mapping and is copied into the scratch region on
        // restore. Keeping it out of the guest mapping of the snapshot
        // region avoids overlap with `map_file_cow` regions installed
        // immediately after the snapshot in guest PA space.
        if !is_incremental {
            copies = phys_seen.into_iter().map(|(from, to)| (from, to as u64)).collect();
        }
        let new_guest_bytes = new.pages.len();
        debug_assert!(new_guest_bytes.is_multiple_of(page_size::get()));
        let built = started.elapsed();
        let kept_len = kept.len;
        let pt_bytes = layout.get_pt_size();
        let tables_shared = (0..new.tables.count())
            .filter(|&t| new.tables.unchanged(t))
            .count();
        layout.set_snapshot_size(kept.len + new_guest_bytes);
        let shares_restored = kept.len >= restored_len;
        let memory = kept.extend(new.pages, &new.tables, &*shared_mem)?;
        tracing::debug!(
            incremental = is_incremental,
            kept_bytes = kept_len,
            copied_bytes = new_guest_bytes,
            pt_bytes,
            tables_shared,
            built_ms = built.as_secs_f64() * 1e3,
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "snapshot taken"
        );
        *since_restore = Some(Taken {
            memory: memory.clone(),
            copies: Arc::new(copies),
            shares_restored,
        });

        Ok(Self {
            state: Arc::new(SnapshotState {
                layout,
                memory,
                load_info,
                stack_top_gva,
                sregs: Some(sregs),
                #[cfg(target_arch = "x86_64")]
                msrs: Some(msrs),
                next_action,
                original_entrypoint,
                snapshot_generation,
                host_functions,
                virtq,
            }),
            metadata: BTreeMap::new(),
        })
    }

    /// Deserializes the metadata stored under `namespace` as `T`.
    ///
    /// Returns `None` if the namespace has no metadata.
    ///
    /// # Errors
    ///
    /// Returns an error if the JSON metadata cannot be deserialized as `T`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use hyperlight_host::sandbox::snapshot::Snapshot;
    /// # use serde::{Deserialize, Serialize};
    /// #
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// struct Metadata {
    ///     version: u32,
    /// }
    ///
    /// # fn example(snapshot: Arc<Snapshot>) -> Result<(), Box<dyn std::error::Error>> {
    /// let snapshot =
    ///     snapshot.with_metadata("snapshot-metadata-namespace-v1", &Metadata { version: 1 })?;
    /// let metadata = snapshot
    ///     .metadata::<Metadata>("snapshot-metadata-namespace-v1")?
    ///     .expect("metadata should exist");
    /// assert_eq!(metadata, Metadata { version: 1 });
    /// # Ok(())
    /// # }
    /// ```
    pub fn metadata<T>(&self, namespace: &str) -> Result<Option<T>>
    where
        T: serde::de::DeserializeOwned,
    {
        self.metadata
            .get(namespace)
            .map(serde::Deserialize::deserialize)
            .transpose()
            .map_err(Into::into)
    }

    /// Adds `metadata` to this snapshot and returns the result as a new
    /// snapshot. Metadata already stored under `namespace` is replaced.
    ///
    /// This snapshot remains unchanged.
    /// Metadata is saved and loaded with the snapshot.
    ///
    /// # Errors
    ///
    /// Returns an error if `metadata` cannot be serialized as JSON.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use hyperlight_host::sandbox::snapshot::Snapshot;
    /// # use serde::{Deserialize, Serialize};
    /// #
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// struct Metadata {
    ///     version: u32,
    /// }
    ///
    /// # fn example(snapshot: Arc<Snapshot>) -> Result<(), Box<dyn std::error::Error>> {
    /// let snapshot =
    ///     snapshot.with_metadata("snapshot-metadata-namespace-v1", &Metadata { version: 1 })?;
    /// let metadata = snapshot
    ///     .metadata::<Metadata>("snapshot-metadata-namespace-v1")?
    ///     .expect("metadata should exist");
    /// assert_eq!(metadata, Metadata { version: 1 });
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_metadata<T>(&self, namespace: impl Into<String>, metadata: &T) -> Result<Arc<Self>>
    where
        T: serde::Serialize,
    {
        let namespace = namespace.into();
        let metadata = serde_json::to_value(metadata)?;
        let mut metadata_by_namespace = self.metadata.clone();
        metadata_by_namespace.insert(namespace, metadata);
        Ok(Arc::new(Self {
            state: Arc::clone(&self.state),
            metadata: metadata_by_namespace,
        }))
    }

    /// The memory of the new snapshot (its copied pages, and its page
    /// tables) built by [`incremental::build`], with the layout's page
    /// table size set: when the sandbox shares pages with the snapshot it
    /// was restored from and its page tables are of a shape that handles.
    /// `None`: the full rebuild is to make it.
    #[allow(unused_variables)]
    fn incremental<S: SharedMemory>(
        shared_mem: &mut SnapshotSharedMemory<S>,
        scratch_mem: &mut S,
        regions: &[MemoryRegion],
        layout: &mut SandboxMemoryLayout,
        root_pt_gpas: &[u64],
        kept: &Kept,
        previous: Option<&Taken>,
        copies: &mut HashMap<u64, u64>,
    ) -> Result<Option<NewMemory>> {
        #[cfg(all(target_arch = "x86_64", unix, not(unshared_snapshot_mem)))]
        {
            let [root] = root_pt_gpas else {
                return Ok(None);
            };
            if kept.len == 0 {
                return Ok(None);
            }
            let restored_len = shared_mem.guest_mapped_size();
            let current = *layout;
            let built = shared_mem.with_contents(|snap| {
                scratch_mem.with_contents(|scratch| {
                    incremental::build(&incremental::Inputs {
                        snap,
                        scratch,
                        regions,
                        layout: current,
                        root: *root,
                        parent_tables: &snap[restored_len..],
                        restored: SandboxMemoryLayout::BASE_ADDRESS
                            ..SandboxMemoryLayout::BASE_ADDRESS + restored_len,
                        kept: SandboxMemoryLayout::BASE_ADDRESS
                            ..SandboxMemoryLayout::BASE_ADDRESS + kept.len,
                        previous: previous
                            .map(|taken| (&*taken.copies, &taken.memory as &dyn incremental::Pages)),
                    })
                })
            })??;
            let Some(built) = built else {
                return Ok(None);
            };
            *copies = built.copies;
            layout.set_pt_size(built.tables.count() * PAGE_SIZE)?;
            return Ok(Some(NewMemory {
                pages: built.pages,
                tables: built.tables,
            }));
        }
        #[allow(unreachable_code)]
        Ok(None)
    }

    /// The files this snapshot's memory is mapped from, each once: on
    /// Linux, runs of files shared with the snapshots it was made from
    /// (see `ReadonlySharedMemory`) and one of its own; elsewhere none
    /// are told. An embedder that keeps many snapshots can count the
    /// memory they hold together, each file once, and see what
    /// dropping one gives back.
    pub fn memory_files(&self) -> Vec<SnapshotFile> {
        #[cfg(unix)]
        {
            self.state.memory.files()
        }
        #[cfg(not(unix))]
        {
            Vec::new()
        }
    }

    /// Host memory this snapshot holds of its own, in bytes: what it
    /// does not share with the snapshot it was taken from (the pages
    /// the guest changed since, and its page tables).
    pub fn memory_bytes(&self) -> usize {
        self.state.memory.own_size()
    }

    /// Generation number assigned to this snapshot when it was taken.
    pub(crate) fn snapshot_generation(&self) -> u64 {
        self.state.snapshot_generation
    }

    /// Return the main memory contents of the snapshot
    #[instrument(skip_all, parent = Span::current(), level= "Trace")]
    pub(crate) fn memory(&self) -> &ReadonlySharedMemory {
        &self.state.memory
    }

    /// Return a copy of the load info for the exe in the snapshot
    pub(crate) fn load_info(&self) -> LoadInfo {
        self.state.load_info.clone()
    }

    pub(crate) fn layout(&self) -> &crate::mem::layout::SandboxMemoryLayout {
        &self.state.layout
    }

    pub(crate) fn root_pt_gpa(&self) -> u64 {
        self.state.layout.get_pt_base_gpa()
    }

    pub(crate) fn stack_top_gva(&self) -> u64 {
        self.state.stack_top_gva
    }

    /// Returns the special registers stored in this snapshot.
    /// Returns None for snapshots created directly from a binary (before preinitialisation).
    /// Returns Some for snapshots taken from a running sandbox.
    /// Note: The CR3 value in the returned struct should NOT be used for restore;
    /// use `root_pt_gpa()` instead since page tables are relocated during snapshot.
    pub(crate) fn sregs(&self) -> Option<&CommonSpecialRegisters> {
        self.state.sregs.as_ref()
    }

    /// The MSRs saved in this snapshot.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn msrs(&self) -> Option<&Vec<MsrEntry>> {
        self.state.msrs.as_ref()
    }

    pub(crate) fn next_action(&self) -> NextAction {
        self.state.next_action
    }

    pub(crate) fn virtq(&self) -> Option<&VirtqSnapshot> {
        self.state.virtq.as_ref()
    }

    /// Guest virtual address of the guest binary's ELF entry point,
    /// preserved across the `Initialise` -> `Call` transition. Used
    /// to fill `AT_ENTRY` in guest core dumps. 0 if unknown.
    pub(crate) fn original_entrypoint(&self) -> u64 {
        self.state.original_entrypoint
    }

    /// Validate that `provided` is a superset of the host functions
    /// recorded in this snapshot: every function that was registered
    /// at snapshot time must also be present in `provided` with a
    /// matching signature. Extras in `provided` are allowed.
    ///
    /// A snapshot with no recorded host functions (e.g. one
    /// produced by a test-only constructor) accepts any `provided`
    /// set.
    pub(crate) fn validate_host_functions(
        &self,
        provided: &crate::sandbox::host_funcs::FunctionRegistry,
    ) -> Result<()> {
        let required = match &self.state.host_functions.host_functions {
            Some(v) => v,
            None => return Ok(()),
        };
        if required.is_empty() {
            return Ok(());
        }

        let mut missing: Vec<String> = Vec::new();
        let mut signature_mismatches: Vec<String> = Vec::new();

        for req in required {
            match provided.function_signature(&req.function_name) {
                // Function name is absent from the provided registry.
                None => missing.push(req.function_name.clone()),
                // Function exists, but signature does not match.
                Some((found_parameter_types, found_return_type))
                    if {
                        let params_match = match req.parameter_types.as_deref() {
                            Some(params) => params == found_parameter_types,
                            None => found_parameter_types.is_empty(),
                        };
                        !params_match || req.return_type != found_return_type
                    } =>
                {
                    signature_mismatches.push(format!(
                        "{}: snapshot has {:?} -> {:?}, registered {:?} -> {:?}",
                        req.function_name,
                        req.parameter_types,
                        req.return_type,
                        Some(found_parameter_types.to_vec()),
                        found_return_type,
                    ));
                }
                // Function exists and signature matches.
                Some(_) => {}
            }
        }

        if missing.is_empty() && signature_mismatches.is_empty() {
            return Ok(());
        }

        Err(crate::HyperlightError::SnapshotHostFunctionMismatch {
            missing,
            signature_mismatches,
        })
    }
}

#[cfg(test)]
mod tests {
    use hyperlight_common::flatbuffer_wrappers::host_function_details::HostFunctionDetails;
    use hyperlight_common::vmem::{self, BasicMapping, Mapping, MappingKind, PAGE_SIZE};

    use crate::hypervisor::regs::CommonSpecialRegisters;
    use crate::mem::exe::LoadInfo;
    use crate::mem::layout::SandboxMemoryLayout;
    use crate::mem::mgr::{GuestPageTableBuffer, SandboxMemoryManager, SnapshotSharedMemory};
    use crate::mem::shared_mem::{
        ExclusiveSharedMemory, HostSharedMemory, ReadonlySharedMemory, SharedMemory,
    };

    fn default_sregs() -> CommonSpecialRegisters {
        CommonSpecialRegisters::default()
    }

    fn simple_pt_base() -> usize {
        page_size::get() + SandboxMemoryLayout::BASE_ADDRESS
    }

    fn make_simple_pt_mem(contents: &[u8]) -> SnapshotSharedMemory<ExclusiveSharedMemory> {
        let pt_buf = GuestPageTableBuffer::new(simple_pt_base());
        let mapping = Mapping {
            phys_base: SandboxMemoryLayout::BASE_ADDRESS as u64,
            virt_base: SandboxMemoryLayout::BASE_ADDRESS as u64,
            len: page_size::get() as u64,
            kind: MappingKind::Basic(BasicMapping {
                readable: true,
                writable: true,
                executable: true,
            }),
        };
        unsafe { vmem::map(&pt_buf, mapping) };
        super::map_specials(&pt_buf, PAGE_SIZE);
        let pt_bytes = pt_buf.into_bytes();

        let mut snapshot_mem = vec![0u8; page_size::get() + pt_bytes.len()];
        snapshot_mem[0..page_size::get()].copy_from_slice(contents);
        snapshot_mem[page_size::get()..].copy_from_slice(&pt_bytes);
        ReadonlySharedMemory::from_bytes(&snapshot_mem, page_size::get())
            .unwrap()
            .to_mgr_snapshot_mem()
            .unwrap()
    }

    fn make_simple_pt_mgr() -> (SandboxMemoryManager<HostSharedMemory>, u64) {
        let cfg = crate::sandbox::SandboxConfiguration::default();
        let scratch_mem = ExclusiveSharedMemory::new(cfg.get_scratch_size()).unwrap();
        let mgr = SandboxMemoryManager::new(
            SandboxMemoryLayout::new(cfg, 4096, 0x3000, None).unwrap(),
            make_simple_pt_mem(&vec![0u8; page_size::get()]),
            scratch_mem,
            super::NextAction::None,
        );
        let (mgr, _) = mgr.build().unwrap();
        (mgr, simple_pt_base() as u64)
    }

    #[test]
    fn multiple_snapshots_independent() {
        let (mut mgr, pt_base) = make_simple_pt_mgr();

        // Create first snapshot with pattern A
        let pattern_a = vec![0xAA; page_size::get()];
        let snapshot_a = super::Snapshot::new(
            &mut make_simple_pt_mem(&pattern_a).build().0,
            &mut mgr.scratch_mem,
            &mut None,
            mgr.layout,
            LoadInfo::dummy(),
            Vec::new(),
            &[pt_base],
            0,
            default_sregs(),
            #[cfg(target_arch = "x86_64")]
            Vec::new(),
            super::NextAction::None,
            0,
            1,
            HostFunctionDetails::default(),
            None,
        )
        .unwrap();

        // Create second snapshot with pattern B
        let pattern_b = vec![0xBB; page_size::get()];
        let snapshot_b = super::Snapshot::new(
            &mut make_simple_pt_mem(&pattern_b).build().0,
            &mut mgr.scratch_mem,
            &mut None,
            mgr.layout,
            LoadInfo::dummy(),
            Vec::new(),
            &[pt_base],
            0,
            default_sregs(),
            #[cfg(target_arch = "x86_64")]
            Vec::new(),
            super::NextAction::None,
            0,
            2,
            HostFunctionDetails::default(),
            None,
        )
        .unwrap();

        // Restore snapshot A
        mgr.restore_snapshot(&snapshot_a).unwrap();
        mgr.shared_mem
            .with_contents(|contents| assert_eq!(&contents[0..pattern_a.len()], &pattern_a[..]))
            .unwrap();

        // Restore snapshot B
        mgr.restore_snapshot(&snapshot_b).unwrap();
        mgr.shared_mem
            .with_contents(|contents| assert_eq!(&contents[0..pattern_b.len()], &pattern_b[..]))
            .unwrap();
    }
}
