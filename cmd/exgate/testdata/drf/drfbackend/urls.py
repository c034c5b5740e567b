from django.urls import path
from rest_framework.urlpatterns import format_suffix_patterns

from . import views

urlpatterns = [
    path("api/v1/odr/orders/", views.OrderView.as_view()),
    path("api/v1/odr/orders/bulk/", views.BulkView.as_view()),
    path("api/v1/odr/orders/<str:ids>/", views.StatusView.as_view()),
    path("api/v1/odr/orders/<str:ids>/cancel/", views.WriteView.as_view(kind="cancel_action")),
    path("api/v1/odr/fills/", views.FillsView.as_view()),
    path("api/v1/odr/history/", views.HistoryView.as_view()),
    path("api/v1/wlt/withdrawals/", views.WriteView.as_view(kind="withdrawal")),
    path("api/v1/mkt/markets/", views.MarketsView.as_view()),
    path("test/placed/", views.PlacedView.as_view()),
    path("test/bulk/", views.BulkRecordView.as_view()),
]

# As Django REST framework backends commonly do: "orders.json",
# "orders.api/" reach the view of "orders/" (cmd/exgate's format-suffix
# test proves exgate meets them with the same route and guards).
urlpatterns = format_suffix_patterns(urlpatterns)
