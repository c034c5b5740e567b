from django.urls import path

from . import views

urlpatterns = [
    path("api/v1/odr/orders/", views.OrderView.as_view()),
    path("api/v1/mkt/markets/", views.MarketsView.as_view()),
    path("test/placed/", views.PlacedView.as_view()),
]
