// The HTML report: its numbers against the commands that compute them independently (simulate
// --json, compare --json), bad input, and the page opened in headless Chromium.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/report_command.hpp"
#include "cli/sim_report.hpp"
#include "plan/scenario.hpp"
#include "report/report.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "timeline/trace_writer.hpp"

namespace {

using namespace parallax;
using nlohmann::json;
namespace fs = std::filesystem;

const std::string kScenario = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/gpipe-1b-4xA100.yaml";

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = parallax::test::temp_path("parallax-report-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The JSON the page embeds, as the page's script reads it.
json embedded_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const size_t from = html.find(open);
  REQUIRE(from != std::string::npos);
  const size_t to = html.find("</script>", from);
  return json::parse(html.substr(from + open.size(), to - from - open.size()));
}

/// Writes a predicted trace of the default scenario and a made-up measured one of the same plan:
/// every time stretched by 1.25, three steps. Returns their paths.
std::pair<std::string, std::string> write_traces(const fs::path& dir) {
  const plan::Plan p = plan::resolve_plan(plan::load_scenario("", {}));
  const timeline::Timeline predicted = cli::predicted_timeline(p, sim::simulate(p));
  timeline::Timeline measured = predicted;
  measured.kind = "measured";
  measured.counters.clear();
  measured.events.clear();
  measured.memory = {{0, 900LL << 20, 100LL << 20}, {1, 700LL << 20, 100LL << 20}};  // 800 and 600 MiB taken
  const int64_t period = predicted.events.back().end.count_ns() * 2;
  for (int step = 0; step < 3; ++step)
    for (auto e : predicted.events) {
      e.step = step;
      e.start = plan::Time::ns(step * period + e.start.count_ns() * 5 / 4);
      e.end = plan::Time::ns(step * period + e.end.count_ns() * 5 / 4);
      measured.events.push_back(e);
    }
  const std::string ppath = (dir / "predicted.json").string(), mpath = (dir / "measured.json").string();
  std::ofstream(ppath) << [&] { std::ostringstream o; timeline::write_chrome_trace(predicted, o); return o.str(); }();
  std::ofstream(mpath) << [&] { std::ostringstream o; timeline::write_chrome_trace(measured, o); return o.str(); }();
  return {ppath, mpath};
}

// ---- headless Chromium

bool have_chromium() { return test::run_shell("command -v chromium >/dev/null 2>&1").code == 0; }

/// Runs headless Chromium on `page` with `what` (--dump-dom, or --screenshot=FILE); stdout.
std::string chromium(const fs::path& page, const std::string& what) {
  const fs::path profile = page.parent_path() / "chromium-profile";
  return test::run_shell("chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                         "--disable-background-networking --disable-component-update --disable-sync --user-data-dir=" +
                         profile.string() + " --window-size=1280,900 " + what + " file://" + page.string() +
                         " 2>/dev/null")
      .out;
}

uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) | (uint32_t(uint8_t(s[at + 2])) << 8) |
         uint32_t(uint8_t(s[at + 3]));
}

struct Png {
  uint32_t width = 0, height = 0;
  size_t colours = 0;  ///< distinct colours, counted up to 1000
};

/// Decodes an 8-bit RGB or RGBA PNG (what Chromium writes) far enough to count its colours.
Png decode_png(const std::string& file) {
  Png png;
  REQUIRE(file.size() > 33);
  REQUIRE(file.compare(1, 3, "PNG") == 0);
  png.width = be32(file, 16);
  png.height = be32(file, 20);
  const int depth = uint8_t(file[24]), type = uint8_t(file[25]);
  REQUIRE(depth == 8);
  REQUIRE((type == 2 || type == 6));
  const size_t bpp = type == 6 ? 4 : 3, stride = png.width * bpp;
  std::string idat;
  for (size_t at = 8; at + 8 <= file.size();) {
    const uint32_t len = be32(file, at);
    if (file.compare(at + 4, 4, "IDAT") == 0) idat += file.substr(at + 8, len);
    at += 12 + len;
  }
  std::vector<uint8_t> raw(png.height * (stride + 1));
  uLongf size = raw.size();
  REQUIRE(uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) == Z_OK);
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  std::set<uint32_t> colours;
  for (uint32_t y = 0; y < png.height; ++y) {
    const uint8_t filter = raw[y * (stride + 1)];
    const uint8_t* in = &raw[y * (stride + 1) + 1];
    for (size_t x = 0; x < stride; ++x) {
      const int a = x >= bpp ? cur[x - bpp] : 0, b = prev[x], c = x >= bpp ? prev[x - bpp] : 0;
      const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
      const int predictor = filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2
                            : filter == 4 ? (pa <= pb && pa <= pc ? a : pb <= pc ? b : c) : 0;
      cur[x] = static_cast<uint8_t>(in[x] + predictor);
    }
    for (size_t x = 0; x + 2 < stride && colours.size() < 1000; x += bpp)
      colours.insert(uint32_t(cur[x]) << 16 | uint32_t(cur[x + 1]) << 8 | cur[x + 2]);
    prev.swap(cur);
  }
  png.colours = colours.size();
  return png;
}

/// The text of the element with `id` in dumped HTML ("" when absent).
std::string element_text(const std::string& dom, const std::string& id) {
  const size_t at = dom.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  const size_t from = dom.find('>', at) + 1;
  return dom.substr(from, dom.find('<', from) - from);
}

}  // namespace

TEST_CASE("report: the page of a simulated scenario shows what simulate --json predicts", "[report]") {
  const fs::path dir = fresh_dir("simulated");
  const std::string page = (dir / "report.html").string();
  REQUIRE(test::run_parallax("report " + kScenario + " -o " + page).code == 0);
  const auto sim = test::run_parallax("simulate " + kScenario + " --json");
  REQUIRE(sim.code == 0);
  const json expected = json::parse(sim.out);
  const std::string html = read_text(page);
  const json data = embedded_data(html);

  CHECK(data["summary"]["predicted_step_ms"].get<double>() == Approx(expected["step_time_ms"].get<double>()).epsilon(1e-9));
  CHECK(data["critical_path"]["actions"].size() == expected["critical_path"].size());
  CHECK(data["critical_path"]["actions"][0]["action"] == expected["critical_path"][0]);
  REQUIRE(!data["links"]["busiest"].empty());
  CHECK(data["links"]["busiest"][0]["avg_gbps"].get<double>() ==
        Approx(expected["links"][0]["avg_gbps"].get<double>()).epsilon(1e-3));
  REQUIRE(data["memory"].size() == expected["ranks"].size());
  CHECK(data["memory"][0]["total_mb"].get<double>() ==
        Approx(expected["ranks"][0]["peak_memory_mb"].get<double>()).epsilon(1e-6));
  CHECK(data["ranks"][1]["bubble_fraction"][0].get<double>() ==
        Approx(expected["ranks"][1]["bubble_fraction"].get<double>()).margin(1e-9));
  // The timeline's rows say where each rank sits: four pipeline stages, a rank each.
  CHECK(data["rank_roles"] == json({"pp 0", "pp 1", "pp 2", "pp 3"}));

  // Self-contained: nothing to fetch. The SVG namespace name is an identifier, never loaded.
  std::string text = html;
  for (size_t at; (at = text.find("http://www.w3.org/2000/svg")) != std::string::npos;) text.erase(at, 26);
  CHECK(text.find("http://") == std::string::npos);
  CHECK(text.find("https://") == std::string::npos);
  CHECK(text.find("<link") == std::string::npos);
  CHECK(text.find(" src=") == std::string::npos);
}

TEST_CASE("report: predicted and measured traces give compare's step error and per-kind errors", "[report]") {
  const fs::path dir = fresh_dir("traces");
  const auto [predicted, measured] = write_traces(dir);
  const std::string page = (dir / "report.html").string();
  REQUIRE(test::run_parallax("report --predicted " + predicted + " --measured " + measured + " -o " + page).code == 0);
  const auto cmp = test::run_parallax("compare " + predicted + " " + measured + " --json");
  REQUIRE(cmp.code == 0);
  const json expected = json::parse(cmp.out);
  const json data = embedded_data(read_text(page));

  CHECK(data["summary"]["step_error"].get<double>() == Approx(expected["step_time_ms"]["error"].get<double>()));
  CHECK(data["summary"]["step_error"].get<double>() == Approx(1 / 1.25 - 1).margin(1e-4));  // everything 1.25x longer
  CHECK(data["summary"]["shown_step"] == 1);  // steps 1 and 2 are measured, equally long: the first of them
  // Two steps after the warm-up: compare's few-steps caveat goes on the page too.
  REQUIRE(data["summary"]["warnings"].size() == 1);
  CHECK_THAT(data["summary"]["warnings"][0].get<std::string>(), Catch::Contains("few steps") && Catch::Contains("this run has 2"));
  REQUIRE(data["kinds"].size() == expected["kinds"].size());
  CHECK(data["kinds"][0]["mean_abs_error"].get<double>() == Approx(expected["kinds"][0]["mean_abs_error"].get<double>()));
  // The predicted trace carries its plan and link counters, so memory and links survive the file.
  REQUIRE(data["memory"].size() == 2);
  CHECK(data["memory"][1]["measured_mb"].get<double>() == Approx(600));
  CHECK(data["memory"][1]["measured_mb"].get<double>() == Approx(expected["ranks"][1]["memory_mb"]["measured"].get<double>()));
  CHECK(!data["links"]["busiest"].empty());
  CHECK_FALSE(data["critical_path"]["known"].get<bool>());
  CHECK(data["timeline"]["measured"]["start"].size() == data["timeline"]["predicted"]["start"].size());
}

TEST_CASE("report: bad input exits 2 and writes nothing", "[report]") {
  const fs::path dir = fresh_dir("bad");
  const auto [predicted, measured] = write_traces(dir);
  const std::string page = (dir / "report.html").string();
  std::ofstream(dir / "broken.json") << "{\"traceEvents\": [";
  std::ofstream(dir / "not-tune.json") << "{\"step_time_ms\": 3}";
  const std::string pipeline2 = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-pipeline2.yaml";
  const std::string tuned = (dir / "tune.json").string();
  REQUIRE(test::run_parallax("tune " + pipeline2 + " --json > " + tuned).code == 0);
  const nlohmann::json tune = nlohmann::json::parse(read_text(tuned));
  nlohmann::json other = tune;
  other["scenario"] = "another-job";
  std::ofstream(dir / "other-tune.json") << other.dump();
  nlohmann::json rowless = tune;
  rowless["ranked"][0].erase("predicted_step_ms");  // the page would fail drawing it
  std::ofstream(dir / "rowless-tune.json") << rowless.dump();
  std::ofstream(dir / "empty-tune.json") << "{\"ranked\": []}";
  std::ofstream(dir / "truncated-tune.json") << tune.dump().substr(0, 200);
  const std::vector<std::string> bad = {
      "report",                                                    // no -o
      "report --predicted " + (dir / "missing.json").string() + " -o " + page,
      "report --predicted " + (dir / "broken.json").string() + " -o " + page,
      "report --predicted " + measured + " -o " + page,            // a measured trace as the prediction
      "report --predicted " + predicted + " --measured " + predicted + " -o " + page,
      "report --tune " + (dir / "not-tune.json").string() + " -o " + page,
      "report --tune " + (dir / "other-tune.json").string() + " -o " + page,  // the tuner's result of another scenario
      "report --tune " + (dir / "rowless-tune.json").string() + " -o " + page,
      "report --tune " + (dir / "empty-tune.json").string() + " -o " + page,
      "report --tune " + (dir / "truncated-tune.json").string() + " -o " + page,
      "report --tune " + dir.string() + " -o " + page,  // a folder
      // The tune of this scenario as given, beside a page of another plan of it that it never predicted.
      "report " + pipeline2 + " --set parallel.chunks=4 --tune " + tuned + " -o " + page,
      "report " + kScenario + " --measured " + measured + " -o " + page,  // a run of 2 ranks beside a plan of 4
      "report -o " + (dir / "no-such-folder" / "r.html").string(),
      "report " + kScenario + " --set parallel.chunks=0 -o " + page,
      "report " + kScenario + " --predicted " + predicted + " -o " + page,  // both a scenario and a prediction
  };
  for (const auto& args : bad) {
    INFO(args);
    const auto r = test::run_parallax(args, "", true);
    CHECK(r.code == 2);
    CHECK(!r.out.empty());  // a message on stderr
    CHECK_FALSE(fs::exists(page));
  }
  // Both given: the flag is at fault, not the file it names.
  CHECK_THAT(test::run_parallax("report " + kScenario + " --predicted " + predicted + " -o " + page, "", true).out,
             Catch::StartsWith("--predicted " + predicted + ": give either a SCENARIO to simulate or --predicted TRACE, not both"));
  // Its scenario as given, and its pick (a row of it), are pages it describes.
  const auto best = tune["best"]["overrides"];
  std::string sets;
  for (const auto& [key, value] : best.items()) sets += " --set '" + key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()) + "'";
  for (const std::string& args : {"report " + pipeline2 + " --tune " + tuned, "report " + pipeline2 + sets + " --tune " + tuned}) {
    INFO(args);
    CHECK(test::run_parallax(args + " -o " + page).code == 0);
    fs::remove(page);
  }
  // So is a plan the tune ran for real (--validate), though no ranked row holds it.
  const auto four = test::run_parallax("simulate " + pipeline2 + " --set parallel.chunks=4 --json");
  REQUIRE(four.code == 0);
  nlohmann::json validated = tune;
  validated["validated"] = nlohmann::json::array({{{"overrides", {{"parallel.chunks", 4}}},
                                                   {"predicted_step_ms", nlohmann::json::parse(four.out)["step_time_ms"]},
                                                   {"measured_step_ms", 1.0}}});
  std::ofstream(dir / "validated-tune.json") << validated.dump();
  CHECK(test::run_parallax("report " + pipeline2 + " --set parallel.chunks=4 --tune " + (dir / "validated-tune.json").string() + " -o " + page).code == 0);
  fs::remove(page);
}

TEST_CASE("report: headless Chromium shows the step time and errors, draws the page, logs no errors",
          "[report][browser]") {
  if (!have_chromium()) test::skip("chromium", "chromium is not installed (scripts/setup.sh --browser installs it)");
  const fs::path dir = fresh_dir("browser");
  const auto [predicted, measured] = write_traces(dir);
  const fs::path page = dir / "report.html";
  std::ofstream(dir / "tune.json") << test::run_parallax("tune --search parallel.chunks=4,8,16 --json").out;
  REQUIRE(test::run_parallax("report --predicted " + predicted + " --measured " + measured + " --tune " +
                             (dir / "tune.json").string() + " -o " + page.string()).code == 0);
  const json cmp = json::parse(test::run_parallax("compare " + predicted + " " + measured + " --json").out);

  const std::string dom = chromium(page, "--dump-dom");
  REQUIRE(dom.find("data-ready=\"1\"") != std::string::npos);  // the script ran to its end
  CHECK(element_text(dom, "errors").empty());
  char expected[64];
  std::snprintf(expected, sizeof expected, "%.3f ms", cmp["step_time_ms"]["predicted"].get<double>());
  CHECK(element_text(dom, "step-predicted") == expected);
  std::snprintf(expected, sizeof expected, "%.3f ms", cmp["step_time_ms"]["measured"].get<double>());
  CHECK(element_text(dom, "step-measured") == expected);
  std::snprintf(expected, sizeof expected, "%+.1f%%", 100 * cmp["step_time_ms"]["error"].get<double>());
  CHECK(element_text(dom, "step-error") == expected);
  CHECK(dom.find("id=\"kinds-table\"") != std::string::npos);
  CHECK(dom.find("id=\"tune-table-ranked\"") != std::string::npos);
  CHECK(dom.find("Warning: few steps") != std::string::npos);
  // Each side's bubble bar is its fill and drain with the imbalance on it, both sides in the legend.
  for (const char* part : {"fill and drain predicted", "imbalance predicted", "fill and drain measured", "imbalance measured"})
    CHECK(dom.find(part) != std::string::npos);
  // Links that carried traffic show a rate in a unit that shows it, never a bare 0.00.
  const size_t links = dom.find("id=\"links-table\"");
  REQUIRE(links != std::string::npos);
  const std::string link_rows = dom.substr(links, dom.find("</table>", links) - links);
  CHECK(link_rows.find("B/s</td>") != std::string::npos);
  CHECK(link_rows.find("<td>0.00 ") == std::string::npos);

  const fs::path shot = dir / "report.png";
  chromium(page, "--screenshot=" + shot.string());
  REQUIRE(fs::exists(shot));
  const Png png = decode_png(read_text(shot));
  CHECK(png.width == 1280);
  CHECK(png.height == 900);
  CHECK(png.colours > 50);  // text, bars and charts; a blank page has one colour
}

TEST_CASE("report: a 1,024-rank prediction draws groups of ranks per row", "[report][browser]") {
  const fs::path dir = fresh_dir("large");
  const fs::path page = dir / "report.html";
  REQUIRE(test::run_parallax("report " + kScenario + " --set parallel.data=256 -o " + page.string()).code == 0);
  CHECK(fs::file_size(page) < 20u * 1024 * 1024);
  if (!have_chromium()) test::skip("chromium", "chromium is not installed (scripts/setup.sh --browser installs it)");
  const std::string dom = chromium(page, "--dump-dom");
  REQUIRE(dom.find("data-ready=\"1\"") != std::string::npos);
  CHECK(element_text(dom, "errors").empty());
  const size_t at = dom.find("data-ranks-per-row=\"");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoi(dom.substr(at + 20)) >= 1024 / 48);  // 1,024 ranks in at most 48 rows
}

TEST_CASE("report: a scenario named after the page's markers still gives a whole page", "[report]") {
  const fs::path dir = fresh_dir("markers");
  const std::string page = (dir / "report.html").string();
  const std::string name = "/*PARALLAX_JS*/ PARALLAX_DATA PARALLAX_TITLE <b>";
  REQUIRE(test::run_parallax("report " + kScenario + " --set 'name=" + name + "' -o " + page).code == 0);
  const std::string html = read_text(page);
  CHECK(embedded_data(html)["title"] == name);  // the data landed in its own element, whole
  CHECK(html.find("<title>Parallax report: /*PARALLAX_JS*/ PARALLAX_DATA PARALLAX_TITLE &lt;b&gt;</title>") != std::string::npos);
  CHECK(html.find("'use strict';") != std::string::npos);  // the script was put in once, in its place
  CHECK(html.find("'use strict';") > html.find("id=\"data\""));
  // An HTML comment or script tag in the name can neither hide nor end the data element.
  const std::string tags = "a<!--<script>b</script>c";
  REQUIRE(test::run_parallax("report " + kScenario + " --set 'name=\"" + tags + "\"' -o " + page).code == 0);
  const std::string tagged = read_text(page);
  const size_t data = tagged.find("id=\"data\">");
  CHECK(tagged.find('<', data + 1) == tagged.find("</script>", data));  // no '<' inside the data
  CHECK(embedded_data(tagged)["title"] == tags);
}

// The page of a scenario simulated and run for real (2 steps), as chromium draws it, after checking
// that its data loaded and its script found no error (the page's action ids included).
static std::string page_of_run(const std::string& name, const std::string& yaml) {
  const fs::path dir = fresh_dir(name);
  std::ofstream(dir / "s.yaml") << yaml;
  const std::string scenario = (dir / "s.yaml").string(), predicted = (dir / "p.json").string(), measured = (dir / "m.json").string();
  REQUIRE(test::run_parallax("simulate " + scenario + " -o " + predicted).code == 0);
  REQUIRE(test::run_parallax("run " + scenario + " -o " + measured).code == 0);
  const fs::path page = dir / "report.html";
  REQUIRE(test::run_parallax("report --predicted " + predicted + " --measured " + measured + " -o " + page.string()).code == 0);
  const std::string dom = chromium(page, "--dump-dom");
  REQUIRE(dom.find("data-ready=\"1\"") != std::string::npos);
  CHECK(element_text(dom, "errors").empty());
  return dom;
}

// A prediction on a GPU profile that published runs were predicted on carries how they came out,
// and the page prints it under the step time.
TEST_CASE("report: a plan on a profile with published runs says how its predictions held, and what its kernels are", "[report][browser]") {
  if (!have_chromium()) test::skip("chromium", "chromium is not installed (scripts/setup.sh --browser installs it)");
  const fs::path page = fresh_dir("published") / "report.html";
  const std::string bf16_on_h100 = "--set hardware=h100-nvlink-ib --set parallel.precision=bf16";  // the compute tables' precision
  REQUIRE(test::run_parallax("report " + bf16_on_h100 + " -o " + page.string()).code == 0);
  const json data = embedded_data(read_text(page));
  REQUIRE(data["plan"]["published_check"].size() == 2);
  CHECK(data["plan"]["published_check"][1]["runs_of"] == "Megatron-core MoE");
  const std::string dom = chromium(page, "--dump-dom");
  REQUIRE(dom.find("data-ready=\"1\"") != std::string::npos);
  CHECK_THAT(element_text(dom, "step-published"),
             Catch::Contains("How h100-nvlink-ib's predictions held on published runs") &&
                 Catch::Contains(plan::describe(test::builtin_profile("h100-nvlink-ib").published_check.at(0))));
  // What the step's compute is made of: the figures `simulate --json` gives the same plan, under
  // the step time in the page's words.
  const auto sim = test::run_parallax("simulate " + bf16_on_h100 + " --json");
  REQUIRE(sim.code == 0);
  const json expected = json::parse(sim.out)["kernels"];
  REQUIRE(expected.is_object());
  const json& kernels = data["plan"]["kernels"];
  REQUIRE(kernels.is_object());
  for (const char* kind : {"gemm_ms", "flash_ms", "memory_ms"}) CHECK(kernels[kind].get<double>() == Approx(expected[kind].get<double>()));
  char gemm[32];
  std::snprintf(gemm, sizeof gemm, "GEMMs %.1f ms (", expected["gemm_ms"].get<double>());
  CHECK_THAT(element_text(dom, "step-kernels"), Catch::Contains("Compute kernels of pipeline rank " + std::to_string(expected["pipeline_rank"].get<int>()) + " over the step") && Catch::Contains(gemm) &&
                                                    Catch::Contains("flash attention") && Catch::Contains("memory-bound"));
  // The default scenario's T4s: no published runs, no line; no compute model, no kernels.
  const fs::path plain = fresh_dir("unpublished") / "report.html";
  REQUIRE(test::run_parallax("report -o " + plain.string()).code == 0);
  CHECK(embedded_data(read_text(plain))["plan"]["published_check"].is_null());
  CHECK(embedded_data(read_text(plain))["plan"]["kernels"].is_null());
  CHECK(element_text(chromium(plain, "--dump-dom"), "step-kernels").empty());
}

// A plan whose fullest GPUs need more than the device: said at the top as simulate says it, and
// their bars drawn to simulate's peak (the tensors and, on them, the reserve) in the limit's colour
// (the page had drawn the tensors alone, under the device's line, in grey). The subtitle names the
// context degree, and says that a timeline rank is a tensor group.
TEST_CASE("report: a plan that does not fit says so, and draws its memory to simulate's peak", "[report][browser]") {
  if (!have_chromium()) test::skip("chromium", "chromium is not installed (scripts/setup.sh --browser installs it)");
  const std::string job = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const std::string sets = " --set parallel.virtual=1 --set parallel.partition_len=balanced --set parallel.shard=none --set model.seq_len=8704";
  const auto sim = test::run_parallax("simulate " + job + sets);
  REQUIRE(sim.code == 0);
  CHECK_THAT(sim.out, Catch::Contains("DOES NOT FIT (2 of 8 tensor groups, 16 of 64 GPUs, over the device)"));
  const fs::path page = fresh_dir("nofit") / "report.html";
  REQUIRE(test::run_parallax("report " + job + sets + " -o " + page.string()).code == 0);
  const json data = embedded_data(read_text(page));
  int over = 0;
  for (const auto& m : data["memory"]) over += m["total_mb"].get<double>() > m["device_mb"].get<double>();
  CHECK(over == 16);  // 2 tensor groups of 8 GPUs
  const std::string dom = chromium(page, "--dump-dom");
  REQUIRE(dom.find("data-ready=\"1\"") != std::string::npos);
  CHECK_THAT(element_text(dom, "does-not-fit"), Catch::StartsWith("DOES NOT FIT: 16 of 64 GPUs need more than the device's 80.00 GiB"));
  const size_t chart = dom.find("id=\"memory-chart\"");
  REQUIRE(chart != std::string::npos);
  const std::string memory = dom.substr(chart, dom.find("</svg>", chart) - chart);
  CHECK_THAT(memory, Catch::Contains("fill=\"#c0392b\"") && Catch::Contains("CUDA context and allocator reserve") &&
                         Catch::Contains(">GPU 0<") && Catch::Contains(">50 GiB<"));
  CHECK_THAT(element_text(dom, "subtitle"), Catch::Contains("group r, GPUs 8r to 8r+7"));
  // The same plan with context parallelism names it in the grid; a plan that fits says nothing.
  const fs::path fits = fresh_dir("fits") / "report.html";
  REQUIRE(test::run_parallax("report " + job + " --set parallel.context=2 --set parallel.data=1 -o " + fits.string()).code == 0);
  const std::string fits_dom = chromium(fits, "--dump-dom");
  CHECK(element_text(fits_dom, "does-not-fit").empty());
  CHECK_THAT(element_text(fits_dom, "subtitle"), Catch::Contains("(data x context x pipeline x tensor 1 x 2 x 4 x 8"));
}

// A page whose data a browser cannot hold in one string opened blank (an 898 MB report of 8,192
// GPUs, exit 0): refused instead, saying why and what to do. The limit is V8's string length.
TEST_CASE("report: data beyond a browser's longest string is refused, not written as a blank page", "[report]") {
  CHECK(report::kMaxEmbeddedChars < (size_t{1} << 29) - 24);
  const plan::Plan p = plan::resolve_plan(plan::load_scenario("", {}));
  report::ReportInput in;
  in.predicted = cli::predicted_timeline(p, sim::simulate(p));
  const size_t size = report::render_html(in).size();
  CHECK_THROWS_WITH(report::render_html(in, 1000), Catch::Contains("more than a browser holds in one JavaScript string") &&
                                                       Catch::Contains("nothing written") && Catch::Contains("parallel.data"));
  CHECK(report::render_html(in, size).size() == size);
}

// A MoE run (issue 59): the summary names the experts, their all-to-alls and the imbalance the
// simulator charged; the measured all-to-alls have their own rows.
TEST_CASE("report: a MoE plan shows its experts, and a measured run its all-to-all rows", "[report][browser][moe]") {
  if (!have_chromium()) test::skip("chromium", "chromium is not installed (scripts/setup.sh --browser installs it)");
  const std::string dom = page_of_run(
      "moe",
      "model: {preset: transformer, layers: 2, hidden: 32, heads: 4, ffn: 48, seq_len: 16, vocab: 64, mlp: swiglu, norm: rmsnorm, "
      "positions: rope, bias: false, experts: 4, experts_per_token: 2, expert_ffn: 16}\n"
      "data: {source: synthetic, batch_size: 4, steps: 2}\nparallel: {data: 2, expert: 2, chunks: 2}\nhardware: cpu-host\n");
  CHECK(dom.find("2 MoE blocks of 4 experts (top-2) over expert 2: 4 all-to-alls of") != std::string::npos);
  CHECK(dom.find("load imbalance") != std::string::npos);
  CHECK(dom.find("all_to_all") != std::string::npos);  // the measured exchanges' lane
}

// A sharded run (issue 58): the measured parameter gathers have their own rows, named as the
// executor names them (the page's ids checked against Action::id()'s for every kind).
TEST_CASE("report: a measured sharded run shows its parameter gathers", "[report][browser][shard]") {
  if (!have_chromium()) test::skip("chromium", "chromium is not installed (scripts/setup.sh --browser installs it)");
  const std::string dom = page_of_run("shard",
                                      "model: {preset: mlp, layers: 2, hidden: 16, input: 8, classes: 4}\n"
                                      "data: {source: synthetic, batch_size: 4, steps: 2}\n"
                                      "parallel: {data: 2, chunks: 2, shard: full}\nhardware: cpu-host\n");
  CHECK(dom.find("all_gather") != std::string::npos);  // the measured gathers' lane
}
