#pragma once
// The knob table: every setting a user turns to change the plan without changing the model, the
// data or the hardware (the `parallel` section and `data.batch_size`), defined once. Each entry
// has its key, its typed place in a Scenario, how it is read from YAML (with the place of a bad
// value) and written back as YAML text, the values it may take and its doc line.
//
// The scenario reader, --set, the tuner's --search/--fix and its space, the GUI's knob panel, the
// overrides `tune -o` and "Run for real" write, and `parallax keys` (docs/scenarios.md's table)
// all read this table. A new knob is a field in ParallelSpec and one entry in knobs.cpp.
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "plan/partition.hpp"
#include "plan/scenario.hpp"
#include "plan/yaml_reader.hpp"

namespace parallax::plan {

/// The knob values of a plan: the scenario's parallel section plus the batch per replica. The
/// tuner varies them, the GUI edits them; everything else of the scenario stays as parsed.
struct Settings : ParallelSpec {
  int batch_size = 32;  ///< data.batch_size, per replica
  /// Samples per optimizer step over all replicas; the tuner keeps it fixed.
  int global_batch() const { return data * batch_size * grad_accumulation; }
  bool operator==(const Settings&) const = default;
};

/// A knob's value as its type says: integer, number, boolean, a choice's name, or a partition.
using KnobValue = std::variant<int, double, bool, std::string, PartitionLen>;

enum class KnobType { integer, number, boolean, choice, partition, modules };

/// How the tuner's enumeration (tune/search.cpp) forms a tuned knob's values into configurations.
enum class Coupling {
  crossed,   ///< crossed with every other knob's values by itself
  layout,    ///< data, context, pipeline, tensor: their product is the world
  schedule,  ///< schedule, virtual, chunks, partition_len: each one's values depend on the others'
  batch,     ///< grad_accumulation: batch_size follows it, so the global batch stays
  buckets,   ///< DDP's bucket caps: only where a stage has replicas
};

/// A tuned knob's values when `tune` is not given them (--search): what the scenario's layers,
/// batch and device allow over `world` ranks (plan/search_defaults.hpp). Empty: the enumeration
/// derives them for each configuration.
using SearchDefault = std::function<std::vector<KnobValue>(const Scenario& scenario, int world)>;

struct Knob {
  std::string key;    ///< "parallel.chunks"
  KnobType type = KnobType::integer;
  std::string doc;    ///< one line, as `parallax keys` and the GUI's tooltips show it
  std::vector<std::string> choices;  ///< a choice's names ("<file>.csv" for any CSV path); modules: the names a list may hold
  double min = 0;     ///< integer and number: the smallest value
  double max = 0;     ///< integer: the largest value
  bool above_min = false;  ///< number: min itself is not allowed
  /// integer: a word that stands for 0, the value that follows another knob (shard_group's "data").
  std::string zero_word;
  Coupling coupling = Coupling::crossed;  ///< a tuned knob's place in the tuner's enumeration
  SearchDefault search_default;           ///< set for exactly the tuned knobs
  std::function<KnobValue(const Settings&)> get;
  std::function<void(Settings&, const KnobValue&)> set;

  /// The tuner searches it, and `tune --search/--fix` accept it.
  bool tuned() const { return static_cast<bool>(search_default); }
  std::string section() const { return key.substr(0, key.find('.')); }
  std::string name() const { return key.substr(key.find('.') + 1); }
  /// The value of a present field; InputError at the field's place when it is not one.
  KnobValue read(const Field& field) const;
  /// A value given as YAML text (a --search value, a GUI editor's text); InputError at `where`.
  KnobValue parse(const std::string& text, const Location& where) const;
  /// The value as YAML text: "8", "0.5", "true", "1f1b", "[4, 6]", "balanced".
  std::string format(const KnobValue& value) const;
  /// "integer >= 1", "gpipe | 1f1b | ...": what `parallax keys` says the knob takes.
  std::string allowed() const;
};

/// Every knob, in the order overrides and the GUI's panel list them.
const std::vector<Knob>& knobs();
/// The knob with this key, or null.
const Knob* find_knob(const std::string& key);
/// The knob with this key; std::logic_error when there is none (a programming error).
const Knob& knob(const std::string& key);
/// The names of the knobs in one section ("parallel": data, pipeline, ...), for expect_keys.
std::vector<std::string> knob_names(const std::string& section);

/// Reads every knob present in the document under `root` into `settings` (absent ones keep theirs).
void read_knobs(const Field& root, Settings* settings);

/// The knob values of a scenario.
Settings settings_of(const Scenario& scenario);
/// Sets the knob values on `scenario` (its other values stay), without checking them.
void apply(const Settings& settings, Scenario* scenario);
/// `base` with the knob values set, checked as the scenario reader checks a file (InputError).
Scenario with_settings(const Scenario& base, const Settings& settings);

/// (key, YAML value) for each knob where `settings` differs from `base`, in table order:
/// {"parallel.chunks", "8"}, {"parallel.partition_len", "[5, 7]"}, ...
using Overrides = std::vector<std::pair<std::string, std::string>>;
Overrides overrides(const Settings& base, const Settings& settings);
/// "chunks=8, schedule=1f1b" (keys without their section), or "as given" when none.
std::string describe(const Overrides& overrides);
/// The overrides as `--set` values: "parallel.chunks=8", ...
std::vector<std::string> set_flags(const Overrides& overrides);

/// A number as knobs write it ("25", "0.5").
std::string number_text(double v);

}  // namespace parallax::plan
