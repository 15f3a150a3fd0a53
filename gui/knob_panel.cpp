#include "gui/knob_panel.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <algorithm>
#include <climits>

#include "plan/hardware.hpp"

namespace parallax::gui {
namespace {

QLabel* error_label() {
  auto* error = new QLabel;
  error->setWordWrap(true);
  error->setStyleSheet("color: #c62828;");
  error->hide();
  return error;
}

}  // namespace

KnobPanel::KnobPanel(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout(this);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  for (const plan::Knob& k : plan::knobs())
    add_row(k.key, QString::fromStdString(k.name()), make_editor(k), QString::fromStdString(k.doc));
  hardware_ = new QComboBox;
  connect(hardware_, &QComboBox::currentIndexChanged, this, &KnobPanel::changed);
  add_row("hardware", "hardware", hardware_, "Hardware profile the prediction uses.");
  general_error_ = error_label();
  form->addRow(general_error_);
}

// An editor from the knob's type; each reports its changes once the value is complete.
QWidget* KnobPanel::make_editor(const plan::Knob& k) {
  switch (k.type) {
    case plan::KnobType::integer: {
      auto* s = new QSpinBox;
      s->setRange(static_cast<int>(k.min), static_cast<int>(std::min<double>(k.max, INT_MAX)));
      if (!k.zero_word.empty()) {  // shard_group's "data": 0, shown as its word at the bottom of the range
        s->setMinimum(0);
        s->setSpecialValueText(QString::fromStdString(k.zero_word));
      }
      s->setKeyboardTracking(false);  // re-simulate when the number is complete, not per digit
      connect(s, &QSpinBox::valueChanged, this, &KnobPanel::changed);
      return s;
    }
    case plan::KnobType::number: {
      auto* s = new QDoubleSpinBox;
      s->setRange(k.above_min ? 0.01 : k.min, 100000);
      s->setDecimals(2);
      if (k.key.ends_with("_mb")) s->setSuffix(" MiB");
      s->setKeyboardTracking(false);
      connect(s, &QDoubleSpinBox::valueChanged, this, &KnobPanel::changed);
      return s;
    }
    case plan::KnobType::boolean: {
      auto* c = new QCheckBox;
      connect(c, &QCheckBox::toggled, this, &KnobPanel::changed);
      return c;
    }
    case plan::KnobType::choice: {
      auto* c = new QComboBox;
      for (const auto& choice : k.choices)
        if (choice.find('<') == std::string::npos) c->addItem(QString::fromStdString(choice));
      connect(c, &QComboBox::currentIndexChanged, this, &KnobPanel::changed);
      return c;
    }
    case plan::KnobType::modules: {  // a list typed as YAML, Megatron-core's usual sets offered
      auto* c = new QComboBox;
      c->setEditable(true);
      for (const char* set : {"[core_attn]", "[layernorm, moe_act]", "[core_attn, layernorm, moe_act]"}) c->addItem(set);
      connect(c->lineEdit(), &QLineEdit::editingFinished, this, &KnobPanel::changed);
      connect(c, &QComboBox::activated, this, &KnobPanel::changed);
      return c;
    }
    case plan::KnobType::partition: {
      auto* c = new QComboBox;
      c->setEditable(true);
      c->addItem("balanced");
      connect(c->lineEdit(), &QLineEdit::editingFinished, this, &KnobPanel::changed);
      connect(c, &QComboBox::activated, this, &KnobPanel::changed);
      return c;
    }
  }
  return new QWidget;
}

void KnobPanel::add_row(const std::string& key, const QString& label, QWidget* editor, const QString& tip) {
  auto* form = static_cast<QFormLayout*>(layout());
  editor->setToolTip(QString::fromStdString(key) + ": " + tip);
  form->addRow(label, editor);
  QLabel* error = error_label();
  form->addRow(error);
  editors_[key] = editor;
  errors_[key] = error;
}

void KnobPanel::set_knobs(const KnobValues& values, const std::string& scenario_hardware) {
  loading_ = true;
  shown_ = values.settings;
  for (const plan::Knob& k : plan::knobs()) {
    QWidget* e = editors_.at(k.key);
    const plan::KnobValue v = k.get(values.settings);
    if (auto* s = qobject_cast<QSpinBox*>(e)) s->setValue(std::get<int>(v));
    else if (auto* d = qobject_cast<QDoubleSpinBox*>(e)) d->setValue(std::get<double>(v));
    else if (auto* c = qobject_cast<QCheckBox*>(e)) c->setChecked(std::get<bool>(v));
    else if (auto* box = qobject_cast<QComboBox*>(e)) {
      const QString text = QString::fromStdString(k.format(v));
      if (!box->isEditable() && box->findText(text) < 0) box->addItem(text);  // a CSV schedule's path
      box->setCurrentText(text);
    }
  }
  if (!scenario_hardware.empty()) {
    hardware_->clear();
    hardware_->addItem(QString::fromStdString("as in the scenario (" + scenario_hardware + ")"), QString());
    for (const auto& n : plan::builtin_hardware_names()) hardware_->addItem(QString::fromStdString(n), QString::fromStdString(n));
  }
  const int at = hardware_->findData(QString::fromStdString(values.hardware));
  hardware_->setCurrentIndex(at < 0 ? 0 : at);
  loading_ = false;
}

KnobValues KnobPanel::knobs() const {
  KnobValues values{shown_, hardware_->currentData().toString().toStdString()};
  for (const plan::Knob& k : plan::knobs()) {
    QWidget* e = editors_.at(k.key);
    if (auto* s = qobject_cast<QSpinBox*>(e)) k.set(values.settings, s->value());
    else if (auto* d = qobject_cast<QDoubleSpinBox*>(e)) k.set(values.settings, d->value());
    else if (auto* c = qobject_cast<QCheckBox*>(e)) k.set(values.settings, c->isChecked());
    else if (auto* box = qobject_cast<QComboBox*>(e))
      k.set(values.settings, k.parse(box->currentText().trimmed().toStdString(), plan::Location{k.key}));
  }
  return values;
}

void KnobPanel::changed() {
  if (loading_) return;
  try {
    const KnobValues values = knobs();
    emit knobs_changed(values);
  } catch (const plan::InputError& e) {
    show_error(e.key(), QString::fromStdString(e.message()));
  }
}

void KnobPanel::show_error(const std::string& key, const QString& message) {
  clear_errors();
  auto it = errors_.find(key);
  QLabel* label = it == errors_.end() ? general_error_ : it->second;
  label->setText(message);
  label->show();
}

void KnobPanel::clear_errors() {
  for (auto& [key, label] : errors_) label->hide(), label->clear();
  general_error_->hide();
  general_error_->clear();
}

QString KnobPanel::error_of(const std::string& key) const {
  auto it = errors_.find(key);
  return it == errors_.end() ? general_error_->text() : it->second->text();
}

QWidget* KnobPanel::editor(const std::string& key) const {
  auto it = editors_.find(key);
  return it == editors_.end() ? nullptr : it->second;
}

QSpinBox* KnobPanel::chunks_box() const { return qobject_cast<QSpinBox*>(editor("parallel.chunks")); }

}  // namespace parallax::gui

