package schemas

// Derived clock-event reasons. dcgm-exporter's default field set leaves
// DCGM_FI_DEV_CLOCKS_EVENT_REASONS (and the violation counters) off: with
// defaults a throttle shows only as the SM clock below its norm, with the
// temperature or the power at its limit. The enricher then derives the
// reasons of a GPU that never reported them, and the default DAG's samples
// fallbacks (schemas/dag/default.json) read the same signs on gpu_samples:
//
//   - a GPU is throttled at a scrape when it is busy (utilization at least
//     ThrottleBusyUtil, when it reports utilization: an idle GPU parks its
//     clock) and its SM clock is below ThrottledClockRatio of the highest
//     SM clock it has reported;
//   - the throttle is thermal (SW thermal slowdown, 0x20) at ThermalSlowdownC
//     or hotter: data-centre GPUs slow down at 85–92 °C and run at 60–80 °C
//     under load;
//   - otherwise it is the power limit (SW power cap, 0x4): a busy GPU held
//     below its clock with no heat is at its power cap, the only other
//     reason a loaded data-centre GPU lowers its clock.
const (
	ThrottledClockRatio = 0.9
	ThermalSlowdownC    = 83.0
	ThrottleBusyUtil    = 0.05
)
