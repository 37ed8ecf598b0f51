// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.

//! An incremental snapshot's page tables and pages, built from what the
//! guest changed since it was restored, on amd64.
//!
//! A restore copies the snapshot's page tables into scratch, at
//! `layout.get_pt_base_gpa()`, and the guest runs on that copy: a page it
//! writes is copied into scratch and its entry pointed there, a table it
//! needs is taken from scratch. So after a run the guest's tables are the
//! restored ones, some of them changed, and some new ones; its pages are
//! the snapshot's, which are unchanged, and some in scratch.
//!
//! [`build`] starts from the restored tables as the guest left them
//! (copying a table only when it rewrites an entry of it) and visits
//! the tables reachable from the root once each: a leaf
//! table identical to the snapshot's own is left as it is, with every page
//! it maps; in the others, each entry that maps a page outside the kept
//! part of the snapshot gets the address of a copy of that page, appended
//! to the new pages (pages of zeroes share one copy), or of the copy the
//! sandbox's previous snapshot made, when the sandbox ran on after it
//! without a restore and the page is unchanged since. A new table is
//! copied after the restored ones. The work is in proportion to the page
//! tables the guest changed and the pages it wrote, not to its memory.
//! What the full rebuild in [`super::Snapshot::new`] drops is dropped
//! here too: the self-map of the page tables. The scratch mapping, which
//! the full rebuild makes anew, is kept when it is the snapshot's own,
//! unchanged; otherwise, as with any tree shape this does not handle (a
//! root that moved, a table outside scratch, a huge page), [`build`]
//! answers `None` and the snapshot is rebuilt in full.

use std::collections::HashMap;
use std::ops::Range;

use hyperlight_common::layout::{SNAPSHOT_PT_GVA_MAX, SNAPSHOT_PT_GVA_MIN, scratch_base_gva};
use hyperlight_common::vmem::PAGE_SIZE;

use super::{PageTables, guest_page};
use crate::mem::layout::SandboxMemoryLayout;
use crate::mem::memory_region::MemoryRegion;

const PRESENT: u64 = 1;
const RW: u64 = 1 << 1;
const ACCESSED: u64 = 1 << 5;
const DIRTY: u64 = 1 << 6;
/// A huge page (in a directory entry).
const PAGE_SIZE_BIT: u64 = 1 << 7;
/// The software bit Hyperlight marks copy-on-write pages with.
const AVL_COW: u64 = 1 << 9;
const NX: u64 = 1 << 63;
const ADDR: u64 = 0x000F_FFFF_FFFF_F000;
const ENTRIES: usize = 512;

/// The pages and the page tables of the new snapshot.
pub(super) struct Built {
    /// The pages it copied, to be mapped right after the kept ones.
    pub(super) pages: Vec<u8>,
    /// Its page tables, to be copied into scratch at the page-table
    /// base on restore, as the full rebuild's are: those that are not
    /// the restored snapshot's unchanged.
    pub(super) tables: PageTables,
    /// Where each page it did not keep in place is in it, by the
    /// address the sandbox has the page at.
    pub(super) copies: HashMap<u64, u64>,
}

/// What [`build`] works from.
pub(super) struct Inputs<'a> {
    /// The sandbox's snapshot memory and scratch memory.
    pub(super) snap: &'a [u8],
    pub(super) scratch: &'a [u8],
    pub(super) regions: &'a [MemoryRegion],
    /// The sandbox's layout: that of the snapshot it was restored from.
    pub(super) layout: SandboxMemoryLayout,
    /// The guest's page-table root now.
    pub(super) root: u64,
    /// The page tables of the snapshot it was restored from, as they
    /// were copied into scratch.
    pub(super) parent_tables: &'a [u8],
    /// The guest addresses of the pages of that snapshot.
    pub(super) restored: Range<usize>,
    /// The guest addresses the new snapshot shares, where they are: those
    /// of the restored snapshot (all of them unless some are folded
    /// away), then those of the previous snapshot's copies.
    pub(super) kept: Range<usize>,
    /// The previous snapshot taken since the restore, if any: where it
    /// put each page it copied, and its memory's page at an offset.
    pub(super) previous: Option<(&'a HashMap<u64, u64>, &'a dyn Pages)>,
}

/// A snapshot's memory, a page at a time.
pub(super) trait Pages {
    /// The page at `offset`; None if it cannot be read (then a page it
    /// was to be compared with is copied again).
    fn page(&self, offset: usize) -> Option<&[u8]>;
}

/// The new snapshot's pages and tables, or `None` when the guest's
/// tables are of a shape this does not handle.
pub(super) fn build(inputs: &Inputs<'_>) -> Option<Built> {
    let pt_base = inputs.layout.get_pt_base_gpa();
    let scratch_base = pt_base - inputs.layout.get_pt_base_scratch_offset() as u64;
    if inputs.root != pt_base {
        return None;
    }
    let restored = inputs.layout.get_pt_size();
    let at = inputs.layout.get_pt_base_scratch_offset();
    let mut builder = Builder {
        inputs,
        pt_base,
        scratch: scratch_base..scratch_base + inputs.scratch.len() as u64,
        scratch_gva: scratch_base_gva(inputs.layout.get_scratch_size()),
        guest_tables: inputs.scratch.get(at..at + restored)?,
        own_tables: vec![None; restored / PAGE_SIZE],
        restored_tables: restored / PAGE_SIZE,
        new_tables: HashMap::new(),
        visited: vec![false; restored / PAGE_SIZE],
        same_tables: vec![false; restored / PAGE_SIZE],
        pages: Vec::new(),
        copies: HashMap::new(),
        zero_page: None,
    };
    builder.visit_tree()?;
    // A table found unchanged on the way (kept as it is, or under the
    // scratch mapping) and not rewritten since was compared whole then; the
    // others are compared as they are now.
    let count = builder.own_tables.len();
    let mut tables = PageTables {
        bytes: Vec::new(),
        at: Vec::with_capacity(count),
    };
    for i in 0..count {
        let unchanged = i < builder.restored_tables
            && ((builder.same_tables[i] && builder.own_tables[i].is_none())
                || builder.table(i) == builder.parent_table(i));
        if unchanged {
            tables.at.push(None);
        } else {
            tables.at.push(Some(tables.bytes.len() / PAGE_SIZE));
            tables.bytes.extend_from_slice(builder.table(i));
        }
    }
    Some(Built {
        pages: builder.pages,
        tables,
        copies: builder.copies,
    })
}

struct Builder<'i, 'a> {
    inputs: &'i Inputs<'a>,
    pt_base: u64,
    /// Guest physical addresses of scratch.
    scratch: Range<u64>,
    scratch_gva: u64,
    /// The restored tables as the guest left them, in scratch.
    guest_tables: &'a [u8],
    /// The new tables, the restored ones first, at their index: a copy
    /// of the guest's, made when an entry of it is rewritten (`None`:
    /// the guest's, as it is), then the tables the guest made.
    own_tables: Vec<Option<Box<[u8]>>>,
    restored_tables: usize,
    /// Index in the new tables of each table the guest made, by its
    /// address in scratch.
    new_tables: HashMap<u64, usize>,
    visited: Vec<bool>,
    /// The restored tables found unchanged, whole, on the way: by
    /// [`Builder::kept_as_is`] and [`Builder::unchanged`].
    same_tables: Vec<bool>,
    pages: Vec<u8>,
    /// Address in the new snapshot of each page copied, by the address
    /// it was copied from.
    copies: HashMap<u64, u64>,
    zero_page: Option<u64>,
}

impl Builder<'_, '_> {
    /// Visits every table reachable from the root, once, depth first.
    fn visit_tree(&mut self) -> Option<()> {
        let mut stack = vec![(0usize, 4u32, 0u64)];
        while let Some((index, level, va)) = stack.pop() {
            if std::mem::replace(&mut self.visited[index], true) {
                continue;
            }
            if level == 1 && self.kept_as_is(index) {
                self.same_tables[index] = true;
                continue;
            }
            for slot in 0..ENTRIES {
                if let Some(child) = self.visit_entry(index, level, va, slot)? {
                    stack.push(child);
                }
            }
        }
        Some(())
    }

    /// Whether the leaf table at `index` is the restored snapshot's own,
    /// unchanged, mapping kept pages only.
    fn kept_as_is(&self, index: usize) -> bool {
        self.inputs.kept.end >= self.inputs.restored.end
            && index < self.restored_tables
            && self.table(index) == self.parent_table(index)
    }

    /// Rewrites entry `slot` of the table at `index` (of `level`, 4 for
    /// the root, mapping from `va`); returns the table it points to when
    /// that is to be visited.
    fn visit_entry(
        &mut self,
        index: usize,
        level: u32,
        va: u64,
        slot: usize,
    ) -> Option<Option<(usize, u32, u64)>> {
        let entry = self.entry(index, slot);
        if entry & PRESENT == 0 {
            return Some(None);
        }
        let span = 1u64 << (12 + 9 * (level - 1));
        let start = canonical(va + slot as u64 * span);
        let end = start.wrapping_add(span - 1);
        if start >= SNAPSHOT_PT_GVA_MIN as u64 && end <= SNAPSHOT_PT_GVA_MAX as u64 {
            // The guest's self-map of its page tables, which a snapshot
            // never has (as in the full rebuild).
            self.set_entry(index, slot, 0);
            return Some(None);
        }
        if start >= self.scratch_gva {
            // The scratch mapping: the snapshot's own, which a restore
            // gives every run.
            return self.unchanged(index, level, slot).then_some(None);
        }
        if level == 1 {
            // A page the new snapshot has already (kept in place, copied,
            // or the previous snapshot's copy, unchanged) before comparing
            // it with the restored snapshot's: most pages a session wrote
            // are unchanged since its previous snapshot.
            let gpa = entry & ADDR;
            let mapped = match self.known(gpa) {
                Some(mapped) => mapped,
                None => {
                    if let Some(original) = self.written_back(index, slot, gpa) {
                        self.set_entry(index, slot, original);
                        return Some(None);
                    }
                    self.copy(gpa)
                }
            };
            self.set_entry(index, slot, leaf(entry, mapped));
            return Some(None);
        }
        if entry & PAGE_SIZE_BIT != 0 {
            return None;
        }
        let child = self.table_index(entry & ADDR)?;
        let address = self.pt_base + (child * PAGE_SIZE) as u64;
        self.set_entry(index, slot, (entry & !ADDR) | address);
        Some(Some((child, level - 1, start)))
    }

    /// The address in the new snapshot of the page at `gpa` if it has
    /// the page already: where it is if it is kept, or a copy's, this
    /// snapshot's or the previous one's.
    fn known(&mut self, gpa: u64) -> Option<u64> {
        let at = gpa as usize;
        if self.inputs.restored.contains(&at) && self.inputs.kept.contains(&at) {
            return Some(gpa);
        }
        if let Some(&copy) = self.copies.get(&gpa) {
            return Some(copy);
        }
        let copy = self.previous_copy(gpa)?;
        self.copies.insert(gpa, copy);
        Some(copy)
    }

    /// The address of a new copy of the page at `gpa`, appended to the
    /// new pages (0: the page is nowhere, and the entry is dropped, as
    /// the full rebuild drops it).
    fn copy(&mut self, gpa: u64) -> u64 {
        // SAFETY: the memories are the sandbox's, not mutated while the
        // snapshot is taken (the caller holds them).
        let contents = unsafe {
            guest_page(
                self.inputs.snap,
                self.inputs.scratch,
                self.inputs.regions,
                self.inputs.layout,
                gpa,
            )
        };
        let copy = match contents {
            None => 0,
            Some(page) if page.iter().all(|&b| b == 0) => match self.zero_page {
                Some(zero) => zero,
                None => {
                    let zero = self.append(page);
                    self.zero_page = Some(zero);
                    zero
                }
            },
            Some(page) => self.append(page),
        };
        self.copies.insert(gpa, copy);
        copy
    }

    /// The restored snapshot's own entry `slot` of its table at `index`,
    /// when the page the guest has there now, at `gpa`, holds what that
    /// entry's page holds, which the new snapshot keeps: the guest wrote
    /// the page and left it as it was (a runtime's bookkeeping, a
    /// collector's marks set and cleared), and the new snapshot maps the
    /// kept page rather than a copy of it.
    fn written_back(&self, index: usize, slot: usize, gpa: u64) -> Option<u64> {
        if index >= self.restored_tables || !self.scratch.contains(&gpa) {
            return None;
        }
        let original = self.parent_entry(index, slot);
        let at = (original & ADDR) as usize;
        let kept = self.inputs.restored.contains(&at) && self.inputs.kept.contains(&at);
        if original & PRESENT == 0 || !kept {
            return None;
        }
        let now = (gpa - self.scratch.start) as usize;
        let then = at - SandboxMemoryLayout::BASE_ADDRESS;
        let same = self.inputs.scratch.get(now..now + PAGE_SIZE)?
            == self.inputs.snap.get(then..then + PAGE_SIZE)?;
        same.then_some(original)
    }

    /// Where the previous snapshot put its copy of the page at `gpa`, if
    /// the new one keeps that copy and the page is unchanged since (a page
    /// of the snapshot memory cannot change; one in scratch may have).
    fn previous_copy(&self, gpa: u64) -> Option<u64> {
        let (copies, previous) = self.inputs.previous?;
        let copy = *copies.get(&gpa)?;
        if copy == 0 || !self.inputs.kept.contains(&(copy as usize)) {
            return None;
        }
        if !self.scratch.contains(&gpa) {
            return Some(copy);
        }
        let now = (gpa - self.scratch.start) as usize;
        let then = copy as usize - SandboxMemoryLayout::BASE_ADDRESS;
        let same = self.inputs.scratch.get(now..now + PAGE_SIZE)? == previous.page(then)?;
        same.then_some(copy)
    }

    fn append(&mut self, page: &[u8]) -> u64 {
        let at = self.pages.len();
        self.pages.extend_from_slice(page);
        (self.inputs.kept.end + at) as u64
    }

    /// The index in the new tables of the table at `gpa`, copying it
    /// there if the guest made it.
    fn table_index(&mut self, gpa: u64) -> Option<usize> {
        if gpa % PAGE_SIZE as u64 != 0 || !self.scratch.contains(&gpa) {
            return None;
        }
        if gpa >= self.pt_base && gpa < self.pt_base + (self.restored_tables * PAGE_SIZE) as u64 {
            return Some(((gpa - self.pt_base) as usize) / PAGE_SIZE);
        }
        if let Some(&index) = self.new_tables.get(&gpa) {
            return Some(index);
        }
        let at = (gpa - self.scratch.start) as usize;
        let table = self.inputs.scratch.get(at..at + PAGE_SIZE)?;
        let index = self.own_tables.len();
        self.own_tables.push(Some(table.into()));
        self.visited.push(false);
        self.new_tables.insert(gpa, index);
        Some(index)
    }

    /// Whether entry `slot` of the table at `index` and what it points
    /// to are the restored snapshot's own, unchanged.
    fn unchanged(&mut self, index: usize, level: u32, slot: usize) -> bool {
        if index >= self.restored_tables {
            return false;
        }
        let entry = self.entry(index, slot);
        if entry != self.parent_entry(index, slot) {
            return false;
        }
        if level == 1 || entry & PRESENT == 0 {
            return true;
        }
        let gpa = entry & ADDR;
        let end = self.pt_base + (self.restored_tables * PAGE_SIZE) as u64;
        if entry & PAGE_SIZE_BIT != 0 || gpa < self.pt_base || gpa >= end {
            return false;
        }
        let child = ((gpa - self.pt_base) as usize) / PAGE_SIZE;
        if self.table(child) != self.parent_table(child) {
            return false;
        }
        // A leaf table the same as the parent's maps what the parent's
        // maps: only tables of tables are walked further.
        let unchanged = level == 2 || (0..ENTRIES).all(|s| self.unchanged(child, level - 1, s));
        self.same_tables[child] |= unchanged;
        unchanged
    }

    fn table(&self, index: usize) -> &[u8] {
        match &self.own_tables[index] {
            Some(table) => table,
            None => &self.guest_tables[index * PAGE_SIZE..(index + 1) * PAGE_SIZE],
        }
    }

    fn parent_table(&self, index: usize) -> &[u8] {
        &self.inputs.parent_tables[index * PAGE_SIZE..(index + 1) * PAGE_SIZE]
    }

    fn entry(&self, index: usize, slot: usize) -> u64 {
        read(self.table(index), slot)
    }

    fn parent_entry(&self, index: usize, slot: usize) -> u64 {
        read(self.parent_table(index), slot)
    }

    fn set_entry(&mut self, index: usize, slot: usize, entry: u64) {
        if self.entry(index, slot) == entry {
            return;
        }
        let guest = self.guest_tables;
        let table = self.own_tables[index]
            .get_or_insert_with(|| guest[index * PAGE_SIZE..(index + 1) * PAGE_SIZE].into());
        table[slot * 8..slot * 8 + 8].copy_from_slice(&entry.to_le_bytes());
    }
}

fn read(table: &[u8], slot: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&table[slot * 8..slot * 8 + 8]);
    u64::from_le_bytes(bytes)
}

/// A leaf entry as the full rebuild writes it, mapping `gpa`: a page that
/// was writable (or copy-on-write) is copy-on-write, one that was not
/// stays read-only; execute permission is kept; 0 where `gpa` is 0 (the
/// page was nowhere).
fn leaf(entry: u64, gpa: u64) -> u64 {
    if gpa == 0 {
        return 0;
    }
    let cow = if entry & (RW | AVL_COW) != 0 { AVL_COW } else { 0 };
    gpa | (entry & NX) | cow | DIRTY | ACCESSED | PRESENT
}

/// `va` with its bit 47 extended, as x86-64 addresses are.
fn canonical(va: u64) -> u64 {
    if va & (1 << 47) != 0 {
        va | 0xffff_0000_0000_0000
    } else {
        va & 0x0000_ffff_ffff_ffff
    }
}
