#include "replay/sweep_plot.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

namespace kvtier::replay {
namespace {

// One colour per policy line (and its shaded disk gain), then references.
constexpr const char* kPolicyColours[] = {"#1f77b4", "#d62728", "#9467bd", "#8c564b"};
// The disk tier's bands: each policy's colour at 18% over white, painted
// opaque, so that where two bands overlap the picture shows one of them
// (a colour of the legend), never a blend of both.
constexpr const char* kBandColours[] = {"#d7e7f2", "#f8d8d8", "#ece4f3", "#eae1df"};
constexpr const char* kBeladyColour = "#555555";
constexpr const char* kMaxColour = "#2ca02c";
constexpr const char* kGridColour = "#e3e3e3";

std::string Escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 has no other control characters.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out += c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

// 3,000,000 → "3M", 1,500,000 → "1.5M", 500,000 → "500k".
std::string TokensLabel(double v) {
  const char* suffix = "";
  if (v >= 1e9) {
    v /= 1e9;
    suffix = "G";
  } else if (v >= 1e6) {
    v /= 1e6;
    suffix = "M";
  } else if (v >= 1e3) {
    v /= 1e3;
    suffix = "k";
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g%s", v, suffix);
  return buf;
}

// The step among 1, 2, 5 × 10^k nearest above span / target.
double NiceStep(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

// A linear or logarithmic axis mapping a value onto [to0, to1] pixels.
class Axis {
 public:
  // `ticks`: about how many ticks a linear axis gets.
  Axis(double lo, double hi, bool log, double to0, double to1, int ticks)
      : lo_(log ? std::log10(lo) : lo),
        hi_(log ? std::log10(hi) : hi),
        log_(log),
        to0_(to0),
        to1_(to1),
        ticks_(ticks) {}
  double operator()(double v) const {
    const double t = ((log_ ? std::log10(v) : v) - lo_) / (hi_ - lo_);
    return to0_ + t * (to1_ - to0_);
  }
  bool log() const { return log_; }
  double lo() const { return log_ ? std::pow(10.0, lo_) : lo_; }
  double hi() const { return log_ ? std::pow(10.0, hi_) : hi_; }

  // Tick values inside the axis: 1, 2, 5 × 10^k on a log axis, a nice step
  // on a linear one.
  std::vector<double> Ticks() const {
    std::vector<double> ticks;
    if (log_) {
      for (double mag = std::pow(10.0, std::floor(lo_)); mag <= hi(); mag *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
          if (m * mag >= lo() * 0.999 && m * mag <= hi() * 1.001) ticks.push_back(m * mag);
        }
      }
    } else {
      const double step = NiceStep(hi_ - lo_, ticks_);
      for (double v = std::ceil(lo_ / step) * step; v <= hi_ + step * 1e-6; v += step) {
        ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
      }
    }
    return ticks;
  }

 private:
  double lo_, hi_;
  bool log_;
  double to0_, to1_;
  int ticks_;
};

struct Point {
  double x, y;
};

std::string Polyline(const std::vector<Point>& pts) {
  std::string s;
  for (const Point& p : pts) s += (s.empty() ? "" : " ") + Num(p.x) + "," + Num(p.y);
  return s;
}

}  // namespace

std::string SweepPlotSvg(const SweepResult& result, const SweepPlotOptions& options) {
  assert(!result.rows.empty());
  const double width = std::clamp<uint32_t>(options.width, 480, 4000);
  const double height = std::clamp<uint32_t>(options.height, 480, 4000);
  const double left = 78, right = width - 240, top = 70, bottom = height - 62;

  // Rows per policy (in the order they come), each sorted by RAM size.
  std::vector<HostEvictionPolicy> policies;
  std::map<HostEvictionPolicy, std::vector<const SweepRow*>> lines;
  double xmin = INFINITY, xmax = 0, ymax = result.MaxHitRatio();
  const bool disk = result.rows.front().disk_tokens > 0;
  for (const SweepRow& r : result.rows) {
    if (lines[r.policy].empty()) policies.push_back(r.policy);
    lines[r.policy].push_back(&r);
    xmin = std::min(xmin, static_cast<double>(r.ram_tokens));
    xmax = std::max(xmax, static_cast<double>(r.ram_tokens));
    ymax = std::max({ymax, r.counts.HitRatio(), r.BeladyHitRatio()});
  }
  for (auto& [policy, rows] : lines) {
    std::sort(rows.begin(), rows.end(),
              [](const SweepRow* a, const SweepRow* b) { return a->ram_tokens < b->ram_tokens; });
  }
  const bool log_x = xmax >= 20 * xmin;
  const Axis x = log_x ? Axis(xmin / 1.25, xmax * 1.25, true, left, right, 0)
                       : Axis(0, xmax * 1.08, false, left, right, 6);
  const double ytop = std::min(1.0, std::ceil(std::max(ymax, 0.01) * 1.1 * 20) / 20);
  const Axis y(0, ytop, false, bottom, top, 8);

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      << "<title>" << Escape(options.title) << "</title>\n"
      << "<desc>kvtier replay --sweep: hit ratio against host (RAM) tier tokens</desc>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  svg << "<text x=\"" << left << "\" y=\"26\" font-size=\"16\" font-weight=\"bold\">"
      << Escape(options.title) << "</text>\n";
  if (!options.subtitle.empty()) {
    svg << "<text x=\"" << left << "\" y=\"46\" fill=\"#444444\">" << Escape(options.subtitle)
        << "</text>\n";
  }

  // Grid, ticks and axes.
  svg << "<g stroke=\"" << kGridColour << "\" stroke-width=\"1\">\n";
  for (double v : y.Ticks()) {
    svg << "<line x1=\"" << left << "\" y1=\"" << Num(y(v)) << "\" x2=\"" << right << "\" y2=\""
        << Num(y(v)) << "\"/>\n";
  }
  for (double v : x.Ticks()) {
    svg << "<line x1=\"" << Num(x(v)) << "\" y1=\"" << top << "\" x2=\"" << Num(x(v)) << "\" y2=\""
        << bottom << "\"/>\n";
  }
  svg << "</g>\n<g font-size=\"11\" fill=\"#222222\">\n";
  for (double v : y.Ticks()) {
    char label[16];
    std::snprintf(label, sizeof(label), ytop <= 0.2 ? "%.2f" : "%.1f", v);
    svg << "<text x=\"" << left - 6 << "\" y=\"" << Num(y(v) + 4) << "\" text-anchor=\"end\">"
        << label << "</text>\n";
  }
  for (double v : x.Ticks()) {
    svg << "<text x=\"" << Num(x(v)) << "\" y=\"" << bottom + 16 << "\" text-anchor=\"middle\">"
        << TokensLabel(v) << "</text>\n";
  }
  svg << "</g>\n<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << right - left
      << "\" height=\"" << bottom - top << "\" fill=\"none\" stroke=\"#222222\"/>\n";
  svg << "<text x=\"" << Num((left + right) / 2) << "\" y=\"" << bottom + 40
      << "\" text-anchor=\"middle\">host (RAM) tier capacity, tokens"
      << (x.log() ? " (log scale)" : "") << "</text>\n";
  svg << "<text transform=\"translate(22," << Num((top + bottom) / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">hit ratio (hit tokens / input tokens)</text>\n";

  // The disk tier's gain: the band between the RAM tier's share and the
  // total, one per policy, under the lines. Painted last policy first, so
  // the first (lru) is on top where they overlap; the RAM shares' dotted
  // lines go over every band.
  if (disk) {
    std::vector<std::vector<Point>> ram_shares(policies.size());
    for (size_t p = policies.size(); p-- > 0;) {
      const std::vector<const SweepRow*>& rows = lines[policies[p]];
      std::vector<Point> band;
      for (const SweepRow* r : rows) band.push_back({x(r->ram_tokens), y(r->counts.HitRatio())});
      for (auto r = rows.rbegin(); r != rows.rend(); ++r) {
        band.push_back({x((*r)->ram_tokens), y((*r)->counts.HitRatioRam())});
      }
      svg << "<polygon points=\"" << Polyline(band) << "\" fill=\"" << kBandColours[p % 4]
          << "\" stroke=\"none\"/>\n";
      ram_shares[p].assign(band.begin() + static_cast<std::ptrdiff_t>(rows.size()), band.end());
    }
    for (size_t p = policies.size(); p-- > 0;) {
      svg << "<polyline points=\"" << Polyline(ram_shares[p]) << "\" fill=\"none\" stroke=\""
          << kPolicyColours[p % 4] << "\" stroke-width=\"1\" stroke-dasharray=\"2,2\"/>\n";
    }
  }

  // References.
  const double ymax_px = y(result.MaxHitRatio());
  svg << "<line x1=\"" << left << "\" y1=\"" << Num(ymax_px) << "\" x2=\"" << right << "\" y2=\""
      << Num(ymax_px) << "\" stroke=\"" << kMaxColour
      << "\" stroke-width=\"1.5\" stroke-dasharray=\"8,4\"/>\n";
  {
    std::vector<Point> belady;
    for (const SweepRow* r : lines[policies.front()]) {
      belady.push_back({x(r->ram_tokens), y(r->BeladyHitRatio())});
    }
    svg << "<polyline points=\"" << Polyline(belady) << "\" fill=\"none\" stroke=\""
        << kBeladyColour << "\" stroke-width=\"1.5\" stroke-dasharray=\"4,3\"/>\n";
  }

  // One line per policy, with the figures of each point as a tooltip; the
  // last policy first, so that the first (lru) is drawn on top of the
  // others where they coincide.
  for (size_t p = policies.size(); p-- > 0;) {
    const char* colour = kPolicyColours[p % 4];
    const std::string name(HostEvictionPolicyName(policies[p]));
    std::vector<Point> pts;
    for (const SweepRow* r : lines[policies[p]]) {
      pts.push_back({x(r->ram_tokens), y(r->counts.HitRatio())});
    }
    svg << "<polyline points=\"" << Polyline(pts) << "\" fill=\"none\" stroke=\"" << colour
        << "\" stroke-width=\"2.5\"/>\n";
    for (size_t i = 0; i < pts.size(); ++i) {
      const SweepRow& r = *lines[policies[p]][i];
      char tip[200];
      std::snprintf(tip, sizeof(tip), "%s, %llu RAM tokens: hit ratio %.5f (RAM %.5f, disk %.5f)",
                    name.c_str(), static_cast<unsigned long long>(r.ram_tokens),
                    r.counts.HitRatio(), r.counts.HitRatioRam(), r.counts.HitRatioDisk());
      svg << "<circle cx=\"" << Num(pts[i].x) << "\" cy=\"" << Num(pts[i].y) << "\" r=\"4\" fill=\""
          << colour << "\"><title>" << Escape(tip) << "</title></circle>\n";
    }
  }

  // Legend, right of the plot.
  const double lx = right + 18;
  double ly = top + 8;
  auto entry = [&](const std::string& swatch, const std::string& text) {
    svg << swatch << "<text x=\"" << lx + 34 << "\" y=\"" << Num(ly + 4) << "\">" << Escape(text)
        << "</text>\n";
    ly += 22;
  };
  auto line_swatch = [&](const char* colour, const char* dash, double w) {
    return "<line x1=\"" + Num(lx) + "\" y1=\"" + Num(ly) + "\" x2=\"" + Num(lx + 26) + "\" y2=\"" +
           Num(ly) + "\" stroke=\"" + colour + "\" stroke-width=\"" + Num(w) + "\"" +
           (dash[0] != '\0' ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") + "/>";
  };
  for (size_t p = 0; p < policies.size(); ++p) {
    const std::string name(HostEvictionPolicyName(policies[p]));
    entry(line_swatch(kPolicyColours[p % 4], "", 2.5), name + (disk ? ": RAM + disk" : ""));
    if (disk) {
      entry("<rect x=\"" + Num(lx) + "\" y=\"" + Num(ly - 6) +
                "\" width=\"26\" height=\"12\" fill=\"" + kBandColours[p % 4] + "\"/>",
            name + ": disk tier's gain");
      entry(line_swatch(kPolicyColours[p % 4], "2,2", 1), name + ": served from RAM");
    }
  }
  char max_label[64];
  std::snprintf(max_label, sizeof(max_label), "unbounded capacity: %.4f", result.MaxHitRatio());
  entry(line_swatch(kMaxColour, "8,4", 1.5), max_label);
  entry(line_swatch(kBeladyColour, "4,3", 1.5), "Belady's MIN (RAM only)");
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace kvtier::replay
