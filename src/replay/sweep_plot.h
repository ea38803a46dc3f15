// The picture of a capacity sweep (`kvtier replay --sweep ... --plot F.svg`):
// hit ratio against RAM (host tier) tokens as a self-contained SVG 1.1
// document, written here rather than by an external plotting program so
// that `--plot` needs nothing installed and the same sweep always gives the
// same bytes.
//
// Drawn: one line per policy (hit ratio with both tiers); with a disk tier,
// the band between the RAM tier's share (hit_ratio_ram) and the total shaded
// in the policy's colour: the disk tier's gain. References: the unbounded
// capacity's hit ratio (max_hit_ratio) as a horizontal line, Belady's MIN at
// each RAM size as a dashed line. Axes with units and ticks; the x axis turns
// logarithmic when the sizes span a factor of 20 or more. A legend on the
// right; each point carries its figures as a tooltip.
//
// Thread safety: pure function.
#ifndef KVTIER_REPLAY_SWEEP_PLOT_H_
#define KVTIER_REPLAY_SWEEP_PLOT_H_

#include <cstdint>
#include <string>

#include "replay/sweep.h"

namespace kvtier::replay {

struct SweepPlotOptions {
  // First line above the plot (escaped: any text is safe).
  std::string title = "Hit ratio against RAM tier size";
  // Second, smaller line (for example the trace and the disk tier).
  std::string subtitle;
  // Size of the picture in pixels. Defaults 880 × 540; each 480..4000.
  uint32_t width = 880;
  uint32_t height = 540;
};

// The SVG document. REQUIRES: result.rows is not empty; options' sizes in
// range.
std::string SweepPlotSvg(const SweepResult& result, const SweepPlotOptions& options = {});

}  // namespace kvtier::replay

#endif  // KVTIER_REPLAY_SWEEP_PLOT_H_
