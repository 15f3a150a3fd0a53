#pragma once
// The knobs: one editor for each entry of the knob table (plan/knobs.hpp), made from its type,
// and one for the hardware profile. Every change emits the whole set of values; an error in a
// combination is shown in red under the knob it is about (the error's key), not in a dialog.
#include <QWidget>
#include <map>
#include <string>

#include "gui/knobs.hpp"

class QComboBox;
class QLabel;
class QSpinBox;

namespace parallax::gui {

class KnobPanel : public QWidget {
  Q_OBJECT
 public:
  explicit KnobPanel(QWidget* parent = nullptr);

  /// Shows values without emitting knobs_changed; `scenario_hardware` names the scenario's own profile.
  void set_knobs(const KnobValues& knobs, const std::string& scenario_hardware);
  /// The values the editors show; InputError (with the knob's key) when a typed text is not a value.
  KnobValues knobs() const;
  /// Shows `message` under the knob `key` (or under all knobs when no knob is at fault).
  void show_error(const std::string& key, const QString& message);
  void clear_errors();
  /// The error shown under a knob ("" when none).
  QString error_of(const std::string& key) const;

  /// The editor of a knob ("parallel.chunks"), or of "hardware".
  QWidget* editor(const std::string& key) const;
  QSpinBox* chunks_box() const;

 signals:
  void knobs_changed(parallax::gui::KnobValues knobs);

 private:
  void changed();
  QWidget* make_editor(const plan::Knob& knob);
  void add_row(const std::string& key, const QString& label, QWidget* editor, const QString& tip);

  std::map<std::string, QWidget*> editors_;
  std::map<std::string, QLabel*> errors_;
  QComboBox* hardware_;
  QLabel* general_error_;
  plan::Settings shown_;  ///< the values last loaded: what no editor shows (a CSV path) comes from it
  bool loading_ = false;
};

}  // namespace parallax::gui
