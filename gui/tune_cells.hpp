#pragma once
// The Tune tab's table cells, for gui/tune_view.cpp and gui/tune_validation.cpp: the columns of
// the ranked table and how a cell shows its text.
#include <QString>
#include <QTableWidgetItem>
#include <cmath>

#include "plan/time.hpp"

namespace parallax::gui::tune_cells {

enum Column { kRank, kChanged, kStep, kSamples, kMemory, kMeasured, kColumns };

inline QTableWidgetItem* item(const QString& text,
                       Qt::Alignment align = Qt::AlignRight | Qt::AlignVCenter) {
  auto* i = new QTableWidgetItem(text);
  i->setFlags(Qt::ItemIsEnabled | Qt::ItemIsSelectable);
  i->setTextAlignment(align);
  return i;
}

/// A step time in ms; "—" for none (0).
inline QString ms_text(plan::Time t) {
  const double ms = t.to_ms();
  return t > plan::Time() ? QString::number(ms, 'f', ms < 10 ? 3 : 2) : QString("—");
}

}  // namespace parallax::gui::tune_cells
