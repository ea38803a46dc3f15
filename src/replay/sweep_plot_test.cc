#include "replay/sweep_plot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

namespace kvtier::replay {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// 1,000 input tokens; hit ratios in thousandths.
SweepRow Row(HostEvictionPolicy policy, uint64_t ram_tokens, uint64_t disk_tokens, uint64_t hit,
             uint64_t hit_ram, uint64_t belady) {
  SweepRow r;
  r.policy = policy;
  r.ram_tokens = ram_tokens;
  r.disk_tokens = disk_tokens;
  r.counts.input_tokens = 1000;
  r.counts.hit_tokens = hit;
  r.counts.hit_tokens_ram = hit_ram;
  r.counts.hit_tokens_disk = hit - hit_ram;
  r.belady_hit_tokens = belady;
  return r;
}

SweepResult PlotResult(uint64_t disk_tokens, std::vector<uint64_t> sizes) {
  SweepResult res;
  res.input_tokens = 1000;
  res.max_hit_tokens = 650;
  for (HostEvictionPolicy p : {HostEvictionPolicy::kLru, HostEvictionPolicy::kReuse}) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const uint64_t ram_hit = 100 * i + (p == HostEvictionPolicy::kReuse ? 30 : 0);
      const uint64_t hit = disk_tokens > 0 ? 600 : ram_hit;
      res.rows.push_back(Row(p, sizes[i], disk_tokens, hit, ram_hit, 200 + 100 * i));
    }
  }
  return res;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

struct Circle {
  double cx, cy;
};

std::vector<Circle> Circles(const std::string& svg) {
  std::vector<Circle> out;
  const std::regex re("<circle cx=\"([0-9.]+)\" cy=\"([0-9.]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back({std::stod((*it)[1]), std::stod((*it)[2])});
  }
  return out;
}

TEST(SweepPlotSvg, ADocumentWithALinePerPolicyAndAPointPerRow) {
  const SweepResult res = PlotResult(0, {3'000'000, 1'000'000, 2'000'000});
  const std::string svg = SweepPlotSvg(res);
  EXPECT_THAT(svg, StartsWith("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "));
  EXPECT_THAT(svg, HasSubstr("width=\"880\" height=\"540\" viewBox=\"0 0 880 540\""));
  EXPECT_THAT(svg, EndsWith("</svg>\n"));
  EXPECT_EQ(Count(svg, "<svg "), 1u);
  EXPECT_EQ(Count(svg, "stroke=\"#1f77b4\" stroke-width=\"2.5"), 2u);  // lru: line + legend
  EXPECT_EQ(Count(svg, "stroke=\"#d62728\" stroke-width=\"2.5"), 2u);  // reuse
  EXPECT_EQ(Count(svg, "<circle "), res.rows.size());
  EXPECT_EQ(Count(svg, "<polygon "), 0u);  // no disk tier: nothing shaded
  EXPECT_THAT(svg, HasSubstr(">host (RAM) tier capacity, tokens</text>"));
  EXPECT_THAT(svg, HasSubstr(">hit ratio (hit tokens / input tokens)</text>"));
  EXPECT_THAT(svg, HasSubstr(">2M</text>"));
  EXPECT_THAT(svg, HasSubstr(">unbounded capacity: 0.6500</text>"));
  EXPECT_THAT(svg, HasSubstr(">Belady&apos;s MIN (RAM only)</text>"));
  EXPECT_EQ(svg, SweepPlotSvg(res));  // the same sweep, the same bytes
}

TEST(SweepPlotSvg, PointsLandInsideThePlotInOrderOfSize) {
  const std::string svg = SweepPlotSvg(PlotResult(0, {3'000'000, 1'000'000, 2'000'000}));
  const std::vector<Circle> c = Circles(svg);
  ASSERT_EQ(c.size(), 6u);
  for (const Circle& p : c) {
    EXPECT_GE(p.cx, 78);
    EXPECT_LE(p.cx, 640);
    EXPECT_GE(p.cy, 70);
    EXPECT_LE(p.cy, 478);
  }
  // reuse is drawn first (lru goes on top): c[0..2] reuse, c[3..5] lru.
  // lru, sorted by RAM size: 1M at 0.1, 2M at 0.2, 3M at 0.0 (on the x
  // axis); x grows with the size, y (downwards) falls as the ratio rises.
  const Circle* lru = &c[3];
  EXPECT_LT(lru[0].cx, lru[1].cx);
  EXPECT_LT(lru[1].cx, lru[2].cx);
  EXPECT_DOUBLE_EQ(lru[2].cy, 478);
  EXPECT_LT(lru[0].cy, lru[2].cy);
  EXPECT_LT(lru[1].cy, lru[0].cy);
  // reuse is 0.03 above lru at every size.
  for (int i = 0; i < 3; ++i) EXPECT_LT(c[i].cy, lru[i].cy);
}

TEST(SweepPlotSvg, ADiskTierShadesItsGainPerPolicy) {
  const std::string svg = SweepPlotSvg(PlotResult(50'000'000, {1'000'000, 2'000'000}));
  EXPECT_EQ(Count(svg, "<polygon "), 2u);
  // Opaque bands: overlapping ones never blend into a colour the legend
  // does not have. Each band's colour is its legend swatch's.
  EXPECT_EQ(Count(svg, "opacity"), 0u);
  EXPECT_EQ(Count(svg, "fill=\"#d7e7f2\""), 2u);  // lru: band + swatch
  EXPECT_EQ(Count(svg, "fill=\"#f8d8d8\""), 2u);  // reuse
  // reuse's band first, lru's on top; both RAM-share lines over both
  // bands; the lru line after the reuse line (on top).
  const size_t reuse_band = svg.find("<polygon points=\"");
  const size_t lru_band = svg.find("<polygon points=\"", reuse_band + 1);
  EXPECT_LT(svg.find("fill=\"#f8d8d8\""), svg.find("fill=\"#d7e7f2\""));
  EXPECT_GT(svg.find("stroke-dasharray=\"2,2\""), lru_band);
  EXPECT_LT(svg.find("stroke=\"#d62728\" stroke-width=\"2.5"),
            svg.find("stroke=\"#1f77b4\" stroke-width=\"2.5"));
  EXPECT_THAT(svg, HasSubstr(">lru: disk tier&apos;s gain</text>"));
  EXPECT_THAT(svg, HasSubstr(">reuse: served from RAM</text>"));
}

TEST(SweepPlotSvg, SizesOverAFactorOf20GetALogAxis) {
  EXPECT_THAT(SweepPlotSvg(PlotResult(0, {100'000, 1'900'000})), Not(HasSubstr("(log scale)")));
  const std::string svg = SweepPlotSvg(PlotResult(0, {100'000, 2'000'000, 50'000'000}));
  EXPECT_THAT(svg, HasSubstr("host (RAM) tier capacity, tokens (log scale)</text>"));
  EXPECT_THAT(svg, HasSubstr(">1M</text>"));
  EXPECT_THAT(svg, HasSubstr(">10M</text>"));
  const std::vector<Circle> c = Circles(svg);
  ASSERT_EQ(c.size(), 6u);
  // Equal ratios, equal distances: 100k → 2M is a factor 20, 2M → 50M 25.
  EXPECT_NEAR((c[2].cx - c[1].cx) / (c[1].cx - c[0].cx), std::log(25.0) / std::log(20.0), 0.01);
}

TEST(SweepPlotSvg, TextIsEscaped) {
  SweepPlotOptions o;
  o.title = "a<b & \"c\"";
  o.subtitle = "trace's </svg>\x01";
  const std::string svg = SweepPlotSvg(PlotResult(0, {512, 1024}), o);
  EXPECT_THAT(svg, HasSubstr(">a&lt;b &amp; &quot;c&quot;</text>"));
  EXPECT_THAT(svg, HasSubstr(">trace&apos;s &lt;/svg&gt;</text>"));
  EXPECT_EQ(Count(svg, "</svg>"), 1u);
  EXPECT_EQ(svg.find('\x01'), std::string::npos);
}

TEST(SweepPlotSvg, SizeIsClampedToAReadableRange) {
  SweepPlotOptions o;
  o.width = 10;
  o.height = 100000;
  EXPECT_THAT(SweepPlotSvg(PlotResult(0, {512}), o),
              HasSubstr("width=\"480\" height=\"4000\" viewBox=\"0 0 480 4000\""));
}

}  // namespace
}  // namespace kvtier::replay
