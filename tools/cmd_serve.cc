// `kvtier serve`: the host's cache daemon (kvtier/server.h, docs/server.md).
//
//   kvtier serve [--config FILE.json] [--<option> VALUE ...] [--json]
//
// Every option of docs/options.md is also a flag of the same name with '-'
// for '_' (--host-bytes 8GiB, --disk-dir D, --server unix:/run/kvtier.sock);
// a flag wins over the file. A string option's value is its text; any
// other is read as JSON when it parses as JSON (numbers, true/false), else
// as a string; then it goes through the one options table. `server` (the socket), `layout` and `host_bytes` (the
// arena) are required. Runs until SIGTERM or SIGINT, then writes every
// block not yet written to the disk tier and prints how many:
//   text: "kvtier serve: wrote N blocks to the tiers below (M dropped)"
//   --json: {"blocks_written", "blocks_dropped", "clients_closed"}
// On start it prints "kvtier serve: listening on PATH ..." to stderr, and
// with --server-http "kvtier serve: HTTP on http://HOST:PORT (/metrics,
// /healthz)" (the port the kernel chose for port 0).
#include <signal.h>

#include <atomic>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "bindings/cache_spec.h"
#include "bindings/option_table.h"
#include "command.h"
#include "kvtier/server.h"
#include "shmem_pages.h"

namespace kvtier::cli {
namespace {

std::atomic<Server*> g_server{nullptr};
// Set by a SIGTERM/SIGINT that comes while the server is still opening (the
// handlers are installed first: a client may see the socket listen and send
// SIGTERM before Open returns, which the default action would turn into an
// exit with 143 and nothing written down).
std::atomic<bool> g_stop_requested{false};

void OnSignal(int) {
  g_stop_requested.store(true);
  if (Server* s = g_server.load()) s->Stop();
}

struct ServeArgs {
  std::string config;
  std::map<std::string, std::string> values;  // option name -> flag text
  std::map<std::string, CLI::Option*> flags;
  std::map<std::string, std::string> types;  // option name -> its type (OptionInfo::type)
};

Result<bindings::CacheSpec> SpecOf(const ServeArgs& a) {
  bindings::CacheSpec spec;
  if (!a.config.empty()) KVTIER_RETURN_IF_ERROR(bindings::ApplyConfigFile(a.config, &spec));
  for (const auto& [name, opt] : a.flags) {
    if (opt->count() == 0) continue;
    const std::string& text = a.values.at(name);
    // A string option takes the text as it is (--server-socket-group 1000
    // is the group numbered 1000, not a number).
    const std::string& type = a.types.at(name);
    nlohmann::json value = text;
    if (!type.starts_with("string") && !type.starts_with("path")) {
      value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (value.is_discarded() || value.is_object() || value.is_array()) value = text;
    }
    KVTIER_RETURN_IF_ERROR(bindings::ApplyOption(name, value, &spec));
  }
  return spec;
}

Result<ServerOptions> OptionsOf(const bindings::CacheSpec& spec) {
  if (!spec.server) return Status::InvalidArgument("server: is required (--server unix:PATH)");
  if (!spec.Has("layout")) return Status::InvalidArgument("layout: is required");
  if (!spec.Has("host_bytes")) {
    return Status::InvalidArgument("host_bytes: is required (the arena's size, e.g. 8GiB)");
  }
  KVTIER_ASSIGN_OR_RETURN(ModelLayout layout,
                          ModelLayout::Resolve(Env::Default(), spec.layout, spec.block_tokens));
  ServerOptions o;
  KVTIER_ASSIGN_OR_RETURN(o.cache, bindings::CacheOptionsFor(layout, spec));
  o.server = *spec.server;
  o.layout = std::move(layout);
  o.namespace_quota_bytes = spec.server_namespace_quota_bytes;
  o.socket_group = spec.server_socket_group;
  if (spec.server_http.has_value()) o.http = *spec.server_http;
  return o;
}

int Run(const ServeArgs& a, const CommonFlags& flags) {
  Result<bindings::CacheSpec> spec = SpecOf(a);
  if (!spec.ok()) return ReportError(flags, spec.status());
  Result<ServerOptions> options = OptionsOf(*spec);
  if (!options.ok()) return ReportError(flags, options.status());
  const std::string where = options->server;
  const uint64_t slot_bytes = options->SlotBytes();
  struct sigaction sa{};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  Result<std::unique_ptr<Server>> server = Server::Open(*std::move(options), Env::Default());
  if (!server.ok()) return ReportError(flags, server.status(), kExitFailure);
  g_server.store(server->get());
  if (g_stop_requested.load()) (*server)->Stop();  // a signal during Open
  std::cerr << "kvtier serve: listening on " << where << " (slots of " << slot_bytes
            << " bytes)" << std::endl;
  if (const std::string huge = ShmemHugeSetting(); !ShmemHugeAllowed(huge)) {
    std::cerr << "kvtier serve: shared-memory huge pages are off (shmem_enabled: " << huge
              << "): a new client's first read of each arena page can be slow on a virtual "
                 "machine; docs/server.md, \"Huge pages\"" << std::endl;
  }
  if (const std::string http = (*server)->HttpAddress(); !http.empty()) {
    std::cerr << "kvtier serve: HTTP on http://" << http << " (/metrics, /healthz)" << std::endl;
  }
  Status run = (*server)->Run();
  Result<ServerShutdownReport> report = (*server)->Shutdown();
  g_server.store(nullptr);
  if (!run.ok()) return ReportError(flags, run, kExitFailure);
  if (!report.ok()) return ReportError(flags, report.status(), kExitFailure);
  if (flags.json) {
    PrintJson({{"blocks_written", report->blocks_written},
               {"blocks_dropped", report->blocks_dropped},
               {"clients_closed", report->clients_closed}});
  } else {
    std::cout << "kvtier serve: wrote " << report->blocks_written
              << " blocks to the tiers below (" << report->blocks_dropped << " dropped)"
              << std::endl;
  }
  return kExitOk;
}

std::function<int()> SetupServe(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<ServeArgs>();
  app->add_option("--config", a->config, "JSON file of options (docs/options.md); flags win");
  for (const bindings::OptionInfo& o : bindings::Options()) {
    std::string flag = "--" + o.name;
    for (char& c : flag) c = c == '_' ? '-' : c;
    a->values[o.name];
    a->types[o.name] = o.type;
    a->flags[o.name] = app->add_option(flag, a->values[o.name], o.doc);
  }
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(serve, "serve",
               "Run the host's cache daemon: a shared-memory RAM tier over a Unix socket",
               SetupServe);
}  // namespace kvtier::cli
