#pragma once
// Internal to the scheduler: the MIG controller's books. Which MIG instances are in use on each
// device (kept sorted by start: the placement indexes read them on every change of a MIG device),
// the devices draining or reconfiguring (a handful at most, looked at without scanning every
// device), the devices that refused a layout change, how many devices are in MIG mode, and since
// when each MIG device has had no instance in use (the hold before MaybeLeaveMig takes it out of
// MIG mode). The scheduler decides what the MIG controller does (scheduler_mig.cc) and tells
// this part what changed; the part only keeps the books so each question is answered without a
// scan. Not thread-safe (owned by one Scheduler, like its other books).

#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/catalogue.h"
#include "core/ids.h"
#include "core/units.h"
#include "sched/views.h"

namespace gpuslice::sched {

class MigBooks {
 public:
  // Sorts instances by start (then profile): the order InUse() keeps.
  static void SortByStart(MigLayout& l);

  // ---- instances in use, per device (valid until its slices change)
  const MigLayout& InUse(const DeviceView& d) const;
  void AddInUse(const DeviceView& d, const MigPlacement& p);
  // `p` must be in use on `d`.
  void RemoveInUse(const DeviceView& d, const MigPlacement& p);

  // ---- devices draining or reconfiguring, in device order
  void SetChanging(const DeviceRef& ref, bool changing);
  const std::set<DeviceRef>& changing() const { return changing_; }

  // ---- devices that refused a layout change (not planned again)
  void MarkBroken(const DeviceRef& ref) { broken_.insert(ref); }
  bool broken(const DeviceRef& ref) const { return broken_.contains(ref); }

  // ---- devices in MIG mode: `delta` entered (+1) or left (-1)
  void CountMigMode(int delta) { mig_mode_devices_ += delta; }
  int mig_mode_devices() const { return mig_mode_devices_; }

  // ---- a memo of NeverFitsWhy(): the device that took the last MIG request (any that takes it
  // gives the same answer, so it is kept by const readers too)
  const DeviceRef& never_fits_witness() const { return never_fits_witness_; }
  void set_never_fits_witness(const DeviceRef& ref) const { never_fits_witness_ = ref; }

  // ---- MIG devices with no instance in use, and since when
  // Notes whether `d` is such a device as of `now` (a device already noted keeps its time);
  // called where that can change, by journaled events only.
  void NoteUse(const DeviceView& d, Micros now);
  bool any_empty() const { return !empty_since_.empty(); }
  // The devices empty since `now - hold` or earlier, in device order; valid until the next call.
  const std::vector<DeviceRef>& EmptyFor(Micros now, Micros hold);

  // The device leaves the cluster: every book forgets it (its MIG mode too).
  void Remove(const DeviceView& d);

 private:
  void ForgetEmpty(const DeviceRef& ref);

  std::unordered_map<const DeviceView*, MigLayout> in_use_;  // devices with an instance in use
  std::set<DeviceRef> changing_;
  std::set<DeviceRef> broken_;
  int mig_mode_devices_ = 0;
  mutable DeviceRef never_fits_witness_;
  std::map<DeviceRef, Micros> empty_since_;
  // The same entries by (since, device): EmptyFor() looks only at the devices empty long
  // enough, not at every empty one. Kept with empty_since_ by NoteUse() and ForgetEmpty().
  std::set<std::pair<Micros, DeviceRef>> empty_by_time_;
  std::vector<DeviceRef> scratch_empty_;  // EmptyFor()'s answer
};

}  // namespace gpuslice::sched
