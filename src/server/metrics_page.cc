#include "server/metrics_page.h"

#include <array>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kvtier::server {
namespace {

// ArenaStats rows that are the arena's TierFigures instead.
constexpr std::array<std::string_view, 6> kArenaTierRows = {
    "published", "published_bytes", "lookups", "hits", "evictions", "publishes"};

struct Sample {
  std::string labels;  // `{name="value",...}` or empty
  uint64_t value = 0;
};

// A HELP text as the exposition format wants it: backslash and newline
// escaped.
std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// One family: `# HELP`, `# TYPE`, its samples. Counters are named
// `<prefix>_<name>_total`, gauges `<prefix>_<name>`.
void Family(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
            const std::vector<Sample>& samples) {
  const bool counter = m.kind == MetricKind::kCounter;
  std::string name(prefix);
  name += '_';
  name += m.name;
  if (counter) name += "_total";
  out << "# HELP " << name << ' ' << EscapeHelp(m.help) << '\n';
  out << "# TYPE " << name << (counter ? " counter\n" : " gauge\n");
  for (const Sample& s : samples) out << name << s.labels << ' ' << s.value << '\n';
}

// Every row of a table of counters and gauges as an unlabelled family,
// but those `keep` refuses.
template <typename Stats, typename Keep>
void Table(std::ostringstream& out, std::string_view prefix, const Stats& stats, Keep keep) {
  stats.ForEachMetric([&](const MetricInfo& m, const auto& value) {
    static_assert(std::is_same_v<std::decay_t<decltype(value)>, uint64_t>,
                  "only counters and gauges here");
    if (keep(m)) Family(out, prefix, m, {Sample{"", value}});
  });
}

template <typename Stats>
void Table(std::ostringstream& out, std::string_view prefix, const Stats& stats) {
  Table(out, prefix, stats, [](const MetricInfo&) { return true; });
}

// Families whose samples come from several labelled values of one table:
// row i of every value goes to family i.
template <typename Stats>
void LabelledTable(std::ostringstream& out, std::string_view prefix,
                   const std::vector<std::pair<std::string, Stats>>& rows) {
  std::vector<std::pair<MetricInfo, std::vector<Sample>>> families;
  Stats{}.ForEachMetric([&](const MetricInfo& m, const auto&) { families.push_back({m, {}}); });
  for (const auto& row : rows) {
    const std::string& labels = row.first;
    size_t i = 0;
    row.second.ForEachMetric([&](const MetricInfo&, const auto& value) {
      using T = std::decay_t<decltype(value)>;
      if constexpr (std::is_same_v<T, uint64_t>) {
        families[i].second.push_back({labels, value});
      } else {
        static_assert(std::is_same_v<T, std::optional<uint64_t>>, "counters and gauges only");
        if (value.has_value()) families[i].second.push_back({labels, *value});
      }
      ++i;
    });
  }
  for (const auto& [m, samples] : families) Family(out, prefix, m, samples);
}

TierFigures ArenaFigures(const ArenaStats& a) {
  TierFigures t;
  t.blocks = a.published;
  t.bytes = a.published_bytes;
  t.hits = a.hits;
  t.misses = a.lookups - a.hits;
  t.stores = a.publishes;
  t.evictions = a.evictions;
  return t;
}

TierFigures HostFigures(const HostTierStats& h) {
  TierFigures t;
  t.blocks = h.entries;
  t.bytes = h.bytes;
  t.hits = h.hits;
  t.misses = h.misses;
  t.stores = h.puts;
  t.evictions = h.evictions;
  return t;
}

TierFigures DiskFigures(const DiskTierStats& d) {
  TierFigures t;
  t.blocks = d.compatible_entries;
  t.bytes = d.compatible_bytes;
  t.hits = d.hits;
  t.misses = d.misses;
  t.stores = d.saves_persisted;
  t.evictions = d.evictions;
  return t;
}

// A Redis tier knows neither what it holds nor what the server evicts.
TierFigures RemoteFigures(const RemoteTierStats& r) {
  TierFigures t;
  t.hits = r.hits;
  t.misses = r.misses;
  t.stores = r.stored;
  return t;
}

std::string TierLabel(std::string_view tier) { return "{tier=\"" + std::string(tier) + "\"}"; }

}  // namespace

std::string RenderMetricsPage(const MetricsSnapshot& snapshot) {
  std::ostringstream out;
  Table(out, "kvtier_server", snapshot.daemon);
  Table(out, "kvtier_server_http", snapshot.http);

  std::vector<std::pair<std::string, TierFigures>> tiers;
  tiers.emplace_back(TierLabel("arena"), ArenaFigures(snapshot.arena));
  if (const std::optional<CacheStats>& below = snapshot.below; below.has_value()) {
    tiers.emplace_back(TierLabel("host"), HostFigures(below->host));
    if (below->disk.has_value()) tiers.emplace_back(TierLabel("disk"), DiskFigures(*below->disk));
    if (below->remote.has_value()) {
      tiers.emplace_back(TierLabel("remote"), RemoteFigures(*below->remote));
    }
  }
  LabelledTable(out, "kvtier_server", tiers);

  Table(out, "kvtier_server_arena", snapshot.arena, [](const MetricInfo& m) {
    for (std::string_view row : kArenaTierRows) {
      if (m.name == row) return false;
    }
    return true;
  });

  std::vector<std::pair<std::string, ClientHoldings>> clients;
  for (const ClientFigures& c : snapshot.clients) {
    clients.emplace_back(
        "{client=\"" + std::to_string(c.id) + "\",pid=\"" + std::to_string(c.pid) + "\"}", c.held);
  }
  LabelledTable(out, "kvtier_server_client", clients);

  std::vector<std::pair<std::string, NamespaceFigures>> namespaces;
  for (const auto& [ns, figures] : snapshot.namespaces) {
    namespaces.emplace_back("{namespace=\"" + ns + "\"}", figures);
  }
  LabelledTable(out, "kvtier_server_namespace", namespaces);

  if (snapshot.below.has_value()) out << snapshot.below->ToPrometheus();
  return out.str();
}

}  // namespace kvtier::server
