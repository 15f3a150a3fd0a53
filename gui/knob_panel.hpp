#pragma once
// The knobs: the scenario's parallel settings and hardware profile, one editor each. Every change
// emits the whole set of values; an error the scenario parser finds in a combination is shown in
// red under the knob it is about, not in a dialog.
#include <QWidget>
#include <map>
#include <string>

#include "gui/knobs.hpp"

class QCheckBox;
class QFormLayout;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace parallax::gui {

class KnobPanel : public QWidget {
  Q_OBJECT
 public:
  explicit KnobPanel(QWidget* parent = nullptr);

  /// Shows values without emitting knobs_changed; `scenario_hardware` names the scenario's own profile.
  void set_knobs(const Knobs& knobs, const std::string& scenario_hardware);
  Knobs knobs() const;
  /// Shows `message` under the knob `key` (or under all knobs when no knob is at fault).
  void show_error(const std::string& key, const QString& message);
  void clear_errors();
  /// The error shown under a knob ("" when none).
  QString error_of(const std::string& key) const;

  QSpinBox* chunks_box() const { return chunks_; }

 signals:
  void knobs_changed(parallax::gui::Knobs knobs);

 private:
  void changed();
  QLabel* add_row(QFormLayout* form, const std::string& key, const QString& label, QWidget* editor,
                  const QString& tip);

  QSpinBox* data_;
  QSpinBox* pipeline_;
  QSpinBox* virtual_;
  QComboBox* partition_len_;
  QSpinBox* chunks_;
  QSpinBox* batch_size_;
  QComboBox* schedule_;
  QDoubleSpinBox* bucket_cap_;
  QDoubleSpinBox* first_bucket_;
  QSpinBox* grad_accumulation_;
  QComboBox* precision_;
  QCheckBox* checkpointing_;
  QComboBox* hardware_;
  std::map<std::string, QLabel*> errors_;
  QLabel* general_error_;
  bool loading_ = false;
};

}  // namespace parallax::gui
